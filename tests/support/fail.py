"""The failure of the suites that are plain scripts (durability, faults,
shard): an expectation that did not hold. unittest suites assert instead."""


class Fail(Exception):
    """A test expectation that did not hold."""


def expect(ok, what) -> None:
    """Raises Fail(what) unless ok."""
    if not ok:
        raise Fail(what)
