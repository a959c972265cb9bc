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
