"""Reads a local dataset twice through a berth cache node with PFIO (the client Preferred
Networks' cache speaks): the first pass misses and fills the cache (PFIO PUTs what it read
from the source), the second must come from the cache. Checks every byte against the files.

usage: pfio_cache.py DATASET_DIR OBJECTS_URL   (token file in PFIO_HTTP_BEARER_TOKEN_PATH)
"""
import os
import sys

from pfio.v2 import HTTPCachedFS, Local, from_url


def read_all(fs, names):
    out = {}
    for n in names:
        with fs.open(n, "rb") as f:
            out[n] = f.read()
    return out


def main():
    root, url = sys.argv[1], sys.argv[2]
    names = sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
    )
    truth = {}
    for n in names:
        with open(os.path.join(root, n), "rb") as f:
            truth[n] = f.read()
    # pass 1: from_url(..., http_cache=...), the way training scripts open datasets
    with from_url(root, http_cache=url) as fs:
        first = read_all(fs, names)
    # pass 2: HTTPCachedFS over a Local fs, spelled out
    fs = HTTPCachedFS(url, Local(root))
    second = read_all(fs, names)
    for n in names:
        assert first[n] == truth[n], f"pass 1 read wrong bytes for {n}"
        assert second[n] == truth[n], f"pass 2 read wrong bytes for {n}"
    print(f"read {len(names)} files twice through {url}")


if __name__ == "__main__":
    main()
