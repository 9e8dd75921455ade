"""The size parser and formatter: one convention, exact byte counts, clear errors."""

import pytest

from pytest_gpucomm.units import SizeError, describe_size, format_size, gbps, parse_size


@pytest.mark.parametrize(
    "text, expected",
    [
        ("512", 512),
        ("512B", 512),
        ("4KB", 4_000),
        ("4KiB", 4_096),
        ("4K", 4_096),
        ("16MB", 16_000_000),
        ("16MiB", 16 * 2**20),
        ("16M", 16 * 2**20),
        ("1GiB", 2**30),
        ("1GB", 10**9),
        ("1G", 2**30),
        ("1.5MB", 1_500_000),
        ("1.5KiB", 1_536),
        ("16mb", 16_000_000),
        (" 2 MiB ", 2 * 2**20),
        ("1TiB", 2**40),
        (4096, 4096),
    ],
)
def test_parse_size_follows_the_documented_convention(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["16XB", "-1MB", "0", "", "abc", "1.5", "0.3B", "MB", "1e400GB", "-5", "nan"])
def test_parse_size_rejects_bad_strings_naming_value_and_origin(bad):
    with pytest.raises(SizeError) as e:
        parse_size(bad, "tests/x.py::test_y @bandwidth(size=...)")
    msg = str(e.value)
    assert repr(bad) in msg
    assert "tests/x.py::test_y @bandwidth(size=...)" in msg


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, None, [1]])
def test_parse_size_rejects_bad_non_strings(bad):
    with pytest.raises(SizeError):
        parse_size(bad)


def test_unknown_unit_error_lists_the_known_units():
    with pytest.raises(SizeError, match=r"unknown unit 'XB'.*KiB"):
        parse_size("16XB")


@pytest.mark.parametrize(
    "n, text",
    [(512, "512 B"), (4096, "4 KiB"), (2**30, "1 GiB"), (1_500_000, "1.5 MB"), (16_000_000, "16 MB"),
     (1536, "1.5 KiB")],
)
def test_format_size_is_exact_binary_or_decimal(n, text):
    assert format_size(n) == text


def test_describe_size_shows_the_exact_byte_count():
    assert describe_size(16 * 2**20) == "16 MiB (16,777,216 bytes)"


def test_gbps_uses_1e9_bytes_per_gb():
    assert gbps(2e9, 1.0) == pytest.approx(2.0)
    assert gbps(1, 0) == float("inf")


@pytest.mark.parametrize("n", [1, 1000, 4096, 1_500_000, 2**30, 1536, 16 * 10**6, 3 * 2**20])
def test_format_then_parse_round_trips_when_exact(n):
    assert parse_size(format_size(n).replace(" ", "")) == n


def test_format_size_approximates_sizes_with_no_short_exact_form():
    assert format_size(3 * 10**9 + 7) == "3 GB"
    assert describe_size(3 * 10**9 + 7) == "3 GB (3,000,000,007 bytes)"


@pytest.mark.parametrize("n", [12345, 4097, 999_999, 1_000_001, 123_456_789, 2**40 + 3, 10**15 + 7])
def test_format_size_prints_every_accepted_size_without_raising(n):
    text = format_size(n)
    assert text and describe_size(n).endswith(f"({n:,} bytes)")


def test_format_size_never_raises_on_a_dense_range_of_byte_counts():
    for n in range(1, 70_000, 7):
        format_size(n)


def test_describe_duration_gives_three_digits_or_one_decimal_when_fixed():
    from pytest_gpucomm.units import describe_duration

    assert [describe_duration(s) for s in (1.2, 0.0201, 153.24e-6, 0.02)] == ["1.20 s", "20.1 ms", "153 us", "20 ms"]
    assert [describe_duration(s, fixed=True) for s in (0.02, 153.24e-6)] == ["20.0 ms", "153.2 us"]
