#!/usr/bin/env python3
"""Counts redis-guard's public API from rustdoc's JSON (the measure of issue 22).

    cargo +nightly rustdoc -p redis-guard --all-features -- -Z unstable-options --output-format json
    python3 scripts/public-api.py [target/doc/redis_guard.json] [-v]

Prints the public names reachable from the crate root (structs, enums, traits, constants,
functions, type aliases; `#[doc(hidden)]` items and re-exports of one item count once), their
inherent and trait methods, and the error types. `-v` lists every name.
"""
import collections
import json
import sys

args = [a for a in sys.argv[1:] if a != "-v"]
doc = json.load(open(args[0] if args else "target/doc/redis_guard.json"))
index = doc["index"]
names = {}
methods = []
seen = set()


def kind(item):
    return next(iter(item["inner"]))


def hidden(item):
    return any("doc(hidden)" in str(a) for a in item.get("attrs", []))


def public_methods(path, item_ids, in_trait=False):
    for m in item_ids:
        mi = index[str(m)]
        if (in_trait or mi["visibility"] == "public") and not hidden(mi):
            methods.append(path + "::" + mi["name"])


def walk(item_id, path):
    item = index.get(str(item_id))
    if item is None or hidden(item):
        return
    k = kind(item)
    inner = item["inner"][k]
    if k == "module":
        for child in inner["items"]:
            ci = index.get(str(child))
            if ci is not None and (ci["visibility"] == "public" or kind(ci) == "use"):
                walk(child, path + [ci.get("name") or ""])
    elif k == "use":
        target = inner.get("id")
        if target is None or str(target) not in index:
            return
        walk(target, path[:-1] if inner.get("is_glob") else path[:-1] + [inner["name"]])
    elif item_id not in seen:
        seen.add(item_id)
        p = "::".join(path)
        names[p] = k
        if k in ("struct", "enum", "union"):
            for imp in inner.get("impls", []):
                ii = index[str(imp)]["inner"]["impl"]
                if ii.get("trait") is None and not ii.get("blanket_impl"):
                    public_methods(p, ii["items"])
        elif k == "trait":
            public_methods(p, inner["items"], in_trait=True)


walk(doc["root"], ["redis_guard"])
kinds = collections.Counter(names.values())
errors = sorted(p for p in names if p.endswith("Error"))
print(f"{len(names)} public names {dict(kinds)}, {len(methods)} public methods")
print(f"{len(errors)} error types: {', '.join(errors)}")
if "-v" in sys.argv:
    for p, k in sorted(names.items()):
        print(k, p)
