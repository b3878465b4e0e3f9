"""The gate board: a web page of every gate, its timeline, what waits behind it, and approvals
(docs/decisions/0072). Beside the webhook and the Kubernetes side in the layers: it may import
the store, the core and the layers below them (it draws the core's evaluation, it does not
compute its own), and flask; never the Kubernetes client. The command line wires it to the
cluster (``cli/board.py``) through the ``Source`` and ``Actions`` protocols of ``board.model``."""
