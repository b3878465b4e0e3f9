"""The serving certificate is picked up when its files change, and the log line says so."""

from __future__ import annotations

import logging

from admission.clock import utcnow
from admission.pki import certs
from admission.transport.tls import ReloadingContext


def test_a_renewed_certificate_is_served_and_logged_under_the_webhooks_name(tmp_path, caplog):
    files, _ = certs.ensure(tmp_path, ["localhost"], utcnow())
    context = ReloadingContext(str(files.cert), str(files.key), check_every=0)
    before = context.get()
    certs.ensure(tmp_path, ["localhost"], utcnow(), force=True)
    with caplog.at_level(logging.INFO):
        after = context.get()
    assert after is not before
    reloaded = [r for r in caplog.records if r.getMessage() == "serving certificate reloaded"]
    # the logger field of the JSON line, as it was before the transport had a package of its own
    assert [r.name for r in reloaded] == ["admission.webhook.tls"]
