"""What every refused command line must look like (the Python tests' shared check)."""


def assert_clean_error(r):
    """A clear error: a non-zero exit, "fp8lm: error:" on stderr, no crash or trace; returns stderr."""
    assert r.returncode != 0, r.stdout
    for bad in ("Traceback", "internal error", "terminate called", "Segmentation", "Aborted"):
        assert bad not in r.stderr
    assert "fp8lm: error:" in r.stderr
    return r.stderr
