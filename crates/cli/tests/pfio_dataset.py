"""Runs as a berth job with a dataset: checks that every file of the dataset is in the node's
cache when the job starts (HEAD of PFIO's key for it), then reads the whole dataset with PFIO
through the cache the way a training script does, and compares every byte with the origin.

usage: pfio_dataset.py    (BERTH_DATASET_PATH, BERTH_DATASET_HTTP_CACHE and
                           PFIO_HTTP_BEARER_TOKEN_PATH come from berth)
"""
import os
import urllib.error
import urllib.parse
import urllib.request

from pfio.v2 import from_url


def main():
    path = os.environ["BERTH_DATASET_PATH"]
    cache = os.environ["BERTH_DATASET_HTTP_CACHE"]
    token = open(os.environ["PFIO_HTTP_BEARER_TOKEN_PATH"]).read().strip()
    names = sorted(
        os.path.relpath(os.path.join(d, f), path)
        for d, _, fs in os.walk(path)
        for f in fs
        if not os.path.islink(os.path.join(d, f))
    )
    cached = 0
    for n in names:
        key = "file:/" + os.path.normpath(os.path.join(path, n))
        req = urllib.request.Request(
            cache + urllib.parse.quote(key, safe="/:"), method="HEAD",
            headers={"Authorization": "Bearer " + token},
        )
        try:
            with urllib.request.urlopen(req) as r:
                cached += r.status == 200
        except urllib.error.HTTPError as e:
            print("not cached at start:", n, e.code)
    print(f"cached at start: {cached} of {len(names)}")
    with from_url(path, http_cache=cache) as fs:
        for n in names:
            with fs.open(n, "rb") as f:
                got = f.read()
            with open(os.path.join(path, n), "rb") as f:
                assert got == f.read(), f"pfio read wrong bytes for {n}"
    print(f"pfio read {len(names)} files, every byte equal")


if __name__ == "__main__":
    main()
