"""Where a warehouse lives: a path stays a path, an s3:// URL is an object location, anything else is refused by
name (a URL never becomes a local folder called `s3:`)."""

from pathlib import Path

import pytest

from resdyn.dagster_project.configuration.config import ConfigError, warehouse_root
from resdyn.dagster_project.configuration.locations import (
    LocalLocation,
    LocationError,
    ObjectLocation,
    parse_location,
)


@pytest.mark.parametrize("text, bucket, prefix", [
    ("s3://resdyn-study/warehouse", "resdyn-study", "warehouse"),
    ("s3://resdyn-study/a/b/", "resdyn-study", "a/b"),
    ("s3://resdyn.study", "resdyn.study", ""),
    ("S3://resdyn-study/x", "resdyn-study", "x"),
])
def test_an_s3_url_is_a_bucket_and_a_prefix_and_keys_lie_under_the_prefix(text, bucket, prefix):
    location = parse_location(text)
    assert location == ObjectLocation(bucket, prefix)
    assert location.key("_published/model=m/checkpoint=c.json") == (
        f"{prefix}/_published/model=m/checkpoint=c.json" if prefix else "_published/model=m/checkpoint=c.json")
    assert parse_location(str(location)) == location


@pytest.mark.parametrize("text", ["warehouse", "runs:v1", "/tmp/a/../b", "~/wh"])
def test_a_path_stays_a_local_directory(text):
    location = parse_location(text)
    assert isinstance(location, LocalLocation)
    assert location.path == Path(text).expanduser().resolve()


def test_a_file_url_is_its_local_path(tmp_path):
    assert parse_location(f"file://{tmp_path}") == LocalLocation(tmp_path.resolve())


@pytest.mark.parametrize("text, says", [
    ("gs://bucket/prefix", "gs:// is not supported"),
    ("https://example.org/wh", "https:// is not supported"),
    ("s3:/bucket/prefix", "two slashes"),
    ("s3:bucket", "two slashes"),
    ("s3://Bucket_Upper/x", "not an S3 bucket name"),
    ("s3://ab/x", "not an S3 bucket name"),
    ("s3://resdyn-study/a//b", "empty, '.' or '..' part"),
    ("s3://resdyn-study/a/../b", "empty, '.' or '..' part"),
])
def test_every_other_form_is_refused_naming_the_forms_that_work(text, says):
    with pytest.raises(LocationError, match=says.replace(".", r"\.").replace("(", r"\(")) as raised:
        parse_location(text)
    assert "s3://BUCKET/PREFIX" in str(raised.value)


def test_where_a_folder_is_still_needed_an_object_warehouse_is_refused_and_nothing_is_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="object-store warehouse"):
        warehouse_root("s3://resdyn-study/warehouse")
    with pytest.raises(ConfigError, match="object-store warehouse"):
        warehouse_root(None, {"RESDYN_WAREHOUSE": "s3://resdyn-study/warehouse"})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, file, expected", [
    ("s3://resdyn-study/out/claims", False, ObjectLocation("resdyn-study", "out/claims")),
    ("s3://resdyn-study", False, ObjectLocation("resdyn-study", "")),
    ("s3://resdyn-study/r/report.html", True, ObjectLocation("resdyn-study", "r/report.html")),
    ("out", False, LocalLocation(Path("out").resolve())),
])
def test_an_output_is_a_local_path_or_an_s3_location_to_upload_to(text, file, expected):
    from resdyn.dagster_project.configuration.locations import parse_output

    assert parse_output(text, "--output", file=file) == expected


@pytest.mark.parametrize("text, file, says", [
    ("s3://resdyn-study", True, "--output s3://resdyn-study: name the object to write, s3://BUCKET/KEY"),
    ("s3:/resdyn-study/out", False, "--output 's3:/resdyn-study/out': an S3 location is s3://BUCKET/PREFIX"),
    ("gs://bucket/out", True, "--output 'gs://bucket/out': the scheme gs:// is not supported; give a local FILE or s3://BUCKET/KEY"),
    (" ", False, "--output is empty: give a local DIR or s3://BUCKET/PREFIX"),
    (5, False, "--output 5: give a local DIR or s3://BUCKET/PREFIX (a str or a path), not int"),
])
def test_an_output_in_another_form_is_refused_in_one_line_naming_the_option(text, file, says, tmp_path, monkeypatch):
    from resdyn.dagster_project.configuration.locations import parse_output

    monkeypatch.chdir(tmp_path)
    with pytest.raises(LocationError) as raised:
        parse_output(text, "--output", file=file)
    assert str(raised.value).startswith(says) and "\n" not in str(raised.value)
    assert list(tmp_path.iterdir()) == []


def test_an_option_that_must_stay_local_refuses_an_s3_url_saying_what_to_give(tmp_path, monkeypatch):
    from resdyn.dagster_project.configuration.locations import local_path

    monkeypatch.chdir(tmp_path)
    assert local_path("kept", "--save-inputs", "give a local DIR") == tmp_path.resolve() / "kept"
    assert local_path(f"file://{tmp_path}/kept", "--save-inputs", "give a local DIR") == tmp_path.resolve() / "kept"
    for text in ("s3://resdyn-study/kept", "S3://resdyn-study/kept"):
        with pytest.raises(LocationError, match=r"^--save-inputs s3://resdyn-study/kept: give a local DIR$"):
            local_path(text, "--save-inputs", "give a local DIR")
    with pytest.raises(LocationError, match="two slashes"):
        local_path("s3:/resdyn-study/kept", "--save-inputs", "give a local DIR")
    assert list(tmp_path.iterdir()) == []
