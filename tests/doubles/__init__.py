"""Every test double: a stand-in for something real that a test cannot, or need not, run.

Each module says what it stands in for and which test holds it to the real thing:

- ``fakekube``: the Kubernetes API client's calls (in memory), FluxCache, a store's lifecycle;
- ``apiserver``: the few API server calls `kubectl gate` / `flux gate` make, over HTTP;
- ``mergepatch``: the API server's JSON merge patch, applied and made;
- ``notification``: Flux notification-controller's event API, over HTTP;
- ``feedserver``: a calendar feed's host, over HTTPS;
- ``balancer``: a Service and kube-proxy in front of replicas;
- ``flux``: the Flux controllers writing to a real API server.

tests/README.md lists them with the tests that use them.
"""
