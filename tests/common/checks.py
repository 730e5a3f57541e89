"""PASS/FAIL counting for the Python checks, ending with the `N passed, N failed` line
every suite closes with. No imports beyond the standard library, so checks that run
without torch (tests/gpu/test_trace_waits.py) share it with tests/common/fsdpgen_ref.py.
"""
passed = 0
failed = 0


def check(ok, msg):
    global passed, failed
    print(("PASS " if ok else "FAIL ") + msg)
    if ok:
        passed += 1
    else:
        failed += 1


def summary():
    """Prints `N passed, N failed`; returns the exit status (0 only when all passed)."""
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1
