"""Leader election in process, against FakeKube's Leases: one leader, takeover after expiry,
and a clean stop hands over at once."""

from __future__ import annotations

from datetime import timedelta

from admission.kube.leader import LeaderElector
from tests.builders import at
from tests.doubles.fakekube import FakeKube
from tests.polling import wait_for

START = at("2026-06-10T12:00")


class Clock:
    """A clock the test moves."""

    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def elector(kube: FakeKube, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(
        None,
        "gate-admission-system",
        "controller",
        identity,
        lease_seconds=15,
        clock=clock,
        coordination=kube,
    )


def lease(kube: FakeKube) -> dict:
    return kube.get("leases", "gate-admission-system", "controller")


def test_the_first_takes_the_lease_and_the_second_waits_until_it_expires():
    kube, clock = FakeKube(), Clock(START)
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a._try() is True and b._try() is False
    assert lease(kube)["spec"]["holderIdentity"] == "a"
    assert lease(kube)["spec"]["renewTime"] == "2026-06-10T12:00:00.000000Z"

    clock.now = START + timedelta(seconds=10)
    assert a._try() is True and b._try() is False  # renewed: still a's
    clock.now = START + timedelta(seconds=26)  # a last renewed at 10s; 15s lease
    assert b._try() is True
    spec = lease(kube)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == "2026-06-10T12:00:26.000000Z"
    assert a._try() is False


def test_running_electors_agree_on_one_leader_and_the_other_takes_over_on_stop():
    kube = FakeKube()
    electors = [
        LeaderElector(None, "gate-admission-system", "controller", name, renew_every=0.05, coordination=kube)
        for name in ("a", "b")
    ]
    for e in electors:
        e.start()
    try:
        wait_for(lambda: any(e.is_leader.is_set() for e in electors), 10, "a leader")
        leaders = [e for e in electors if e.is_leader.is_set()]
        assert len(leaders) == 1 and lease(kube)["spec"]["holderIdentity"] == leaders[0].identity
        follower = next(e for e in electors if e is not leaders[0])
        leaders[0].stop()
        wait_for(follower.is_leader.is_set, 10, "the follower to take over")
        assert lease(kube)["spec"]["holderIdentity"] == follower.identity
    finally:
        for e in electors:
            e.stop()


def test_stop_hands_the_lease_over_at_once():
    kube, clock = FakeKube(), Clock(START)
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a._try()
    a.is_leader.set()
    a.stop()
    assert not a.is_leader.is_set() and lease(kube)["spec"].get("holderIdentity") is None
    assert b._try() is True  # without waiting out the 15 s
