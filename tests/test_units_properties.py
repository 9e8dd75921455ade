"""Property-based tests of the size parser and formatter: every accepted size prints, and reads back."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gpucomm.plugin.markers import size_id
from pytest_gpucomm.units import MAX_SIZE, SizeError, describe_size, format_size, is_exact_size_text, parse_size

UNITS = ["", "B", "KB", "MB", "GB", "TB", "K", "M", "G", "T", "KiB", "MiB", "GiB", "TiB", "kb", "mib", "XB", "b"]
SIZES = st.integers(min_value=1, max_value=MAX_SIZE)


@settings(max_examples=300, deadline=None)
@given(SIZES)
def test_every_accepted_size_prints_and_its_exact_forms_read_back(n):
    text = format_size(n)
    assert describe_size(n) == f"{text} ({n:,} bytes)"
    assert parse_size(n) == parse_size(str(n)) == parse_size(f"{n}B") == n
    if is_exact_size_text(n):
        assert parse_size(text.replace(" ", "")) == n
    assert parse_size(size_id(n)) == n  # a test id names its size exactly


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=20),
                 st.builds(lambda x, u: f"{x}{u}", st.floats(allow_nan=True, allow_infinity=True),
                           st.sampled_from(UNITS)),
                 st.builds(lambda x, u: f"{x}{u}", st.integers(), st.sampled_from(UNITS))))
def test_the_parser_accepts_a_size_within_range_or_raises_its_own_error_naming_the_value(value):
    try:
        n = parse_size(value, "a test")
    except SizeError as e:
        assert repr(value) in str(e) and "(from a test)" in str(e)
    else:
        assert isinstance(n, int) and 1 <= n <= MAX_SIZE
        format_size(n)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(), st.floats(), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)))
def test_non_string_sizes_are_accepted_whole_or_refused_with_a_size_error(value):
    try:
        n = parse_size(value)
    except SizeError:
        return
    assert isinstance(n, int) and 1 <= n <= MAX_SIZE and n == value



def test_a_bandwidth_figure_keeps_three_significant_digits_at_any_scale():
    """Issue 45, item 1: a copy of 4 MB/s printed as ``0.00 GB/s`` beside its baseline's ``0.00``."""
    from pytest_gpucomm.units import format_gbps

    assert [format_gbps(x) for x in (0.004123, 0.0153, 0.5, 1.2, 12.345, 395.93)] == [
        "0.00412", "0.0153", "0.5", "1.20", "12.35", "395.9"]


@given(st.floats(min_value=1e-9, max_value=1e5))
def test_a_printed_bandwidth_figure_reads_back_within_half_a_percent(x):
    from pytest_gpucomm.units import format_gbps

    assert abs(float(format_gbps(x)) - x) <= 0.005 * x
