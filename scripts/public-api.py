#!/usr/bin/env python3
"""Counts redis-guard's public API from rustdoc's JSON (the measure of issue 22).

    cargo +nightly rustdoc -p redis-guard --all-features -- -Z unstable-options --output-format json
    python3 scripts/public-api.py [target/doc/redis_guard.json] [-v]

Prints the public names reachable from the crate root (structs, enums, traits, constants,
functions, type aliases; `#[doc(hidden)]` items and re-exports of one item count once), their
inherent and trait methods, and the error types. `-v` lists every name. `--orphans` lists
the public names that no public signature uses (a parameter, a return type, a bound, a field, a
variant) and no user-facing text names (another item's docs, README.md, docs/guide.md, the small
examples), and exits 1 if there is one: such a name is how the crate is built, not what it offers.
"""
import collections
import glob
import re
import json
import sys

args = [a for a in sys.argv[1:] if not a.startswith("-")]
doc = json.load(open(args[0] if args else "target/doc/redis_guard.json"))
index = doc["index"]
names = {}
ids = {}
methods = []
# Every item a user can reach: the names, their public methods, fields and variants.
reachable = []  # (item, the id of the name it belongs to)
seen = set()


def kind(item):
    return next(iter(item["inner"]))


def hidden(item):
    return any("doc(hidden)" in str(a) for a in item.get("attrs", []))


def public_methods(path, owner, item_ids, in_trait=False):
    for m in item_ids:
        mi = index[str(m)]
        if (in_trait or mi["visibility"] == "public") and not hidden(mi):
            methods.append(path + "::" + mi["name"])
            reachable.append((mi, owner))


def walk(item_id, path):
    item = index.get(str(item_id))
    if item is None or hidden(item):
        return
    k = kind(item)
    inner = item["inner"][k]
    if k == "module":
        reachable.append((item, item_id))  # its docs are user-facing text
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
        ids[p] = item_id
        reachable.append((item, item_id))
        members(item_id, k, inner)
        if k in ("struct", "enum", "union"):
            for imp in inner.get("impls", []):
                ii = index[str(imp)]["inner"]["impl"]
                if ii.get("trait") is None and not ii.get("blanket_impl"):
                    public_methods(p, item_id, ii["items"])
        elif k == "trait":
            public_methods(p, item_id, inner["items"], in_trait=True)


def members(owner, k, inner):
    """The public fields and variants of a struct or an enum, reachable with it."""
    if k == "struct":
        sk = inner["kind"] if isinstance(inner["kind"], dict) else {}
        fields = sk.get("plain", {}).get("fields", []) or sk.get("tuple", [])
    elif k == "enum":
        fields = inner["variants"]
    else:
        return
    for f in fields:
        fi = index.get(str(f)) if f is not None else None
        if fi is not None and not hidden(fi):
            reachable.append((fi, owner))
            if "variant" in fi["inner"]:
                vk = fi["inner"]["variant"]["kind"]
                sub = vk.get("tuple", []) if isinstance(vk, dict) else []
                sub += vk.get("struct", {}).get("fields", []) if isinstance(vk, dict) else []
                reachable.extend((index[str(x)], owner) for x in sub if x is not None and str(x) in index)


def used_ids(tree, out):
    """The ids of every path a signature names (a type's `resolved_path`, a bound's trait)."""
    if isinstance(tree, dict):
        if "path" in tree and "id" in tree and isinstance(tree["path"], str):
            out.add(tree["id"])
        for v in tree.values():
            used_ids(v, out)
    elif isinstance(tree, list):
        for v in tree:
            used_ids(v, out)


def orphans():
    """The names no public signature uses and no user-facing text names: what a name's own
    methods, fields and docs say of it does not count."""
    used = collections.defaultdict(set)
    for item, owner in reachable:
        found = set()
        inner = item["inner"]
        k = kind(item)
        # A struct's or enum's own inner lists impls and fields by id, not by path: only the
        # signatures of what is reachable count (fields and variants are items of their own).
        if k in ("function", "struct_field", "type_alias", "constant", "assoc_type", "assoc_const"):
            used_ids(inner, found)
        elif k in ("struct", "enum", "trait"):
            used_ids(inner[k].get("generics", {}), found)
            used_ids(inner[k].get("bounds", []), found)
        elif k == "variant":
            used_ids(inner, found)
        # What its impls name: `type Future = ResponseFuture<…>` of `impl Service`, the
        # `type Rejection` of an extractor, `impl From<X> for Y`.
        if k in ("struct", "enum"):
            for imp in inner[k].get("impls", []):
                ii = index[str(imp)]["inner"]["impl"]
                if ii.get("blanket_impl") or ii.get("is_synthetic"):
                    continue
                used_ids(ii.get("trait") or {}, found)
                for m in ii["items"]:
                    mi = index.get(str(m))
                    if mi is not None and (ii.get("trait") is not None or mi["visibility"] == "public"):
                        used_ids(mi["inner"], found)
        for f in found:
            used[f].add(owner)
    docs, links = collections.defaultdict(str), collections.defaultdict(set)
    for item, owner in reachable:
        docs[owner] += item.get("docs") or ""
        for target in item.get("links", {}).values():
            links[target].add(owner)
    text = ""
    for path in ["README.md", "docs/guide.md"] + sorted(glob.glob("examples/*/src/*.rs")):
        text += open(path).read()
    lonely = []
    for p, item_id in sorted(ids.items()):
        users = used.get(item_id, set()) - {item_id}
        name = p.rsplit("::", 1)[1]
        mentioned = re.search(r"\b" + re.escape(name) + r"\b", text) is not None
        pattern = re.compile(r"\b" + re.escape(name) + r"\b")
        in_docs = bool(links.get(item_id, set()) - {item_id}) or any(
            pattern.search(t) for i, t in docs.items() if i != item_id
        )
        if "-v" in sys.argv:
            why = [w for w, on in (("signature", users), ("text", mentioned), ("docs", in_docs)) if on]
            print(f"  {p}: {', '.join(why) or 'nothing'}")
        if not users and not mentioned and not in_docs:
            lonely.append(p)
    return lonely


walk(doc["root"], ["redis_guard"])
kinds = collections.Counter(names.values())
errors = sorted(p for p in names if p.endswith("Error"))
print(f"{len(names)} public names {dict(kinds)}, {len(methods)} public methods")
print(f"{len(errors)} error types: {', '.join(errors)}")
if "-v" in sys.argv:
    for p, k in sorted(names.items()):
        print(k, p)
if "--orphans" in sys.argv:
    lonely = orphans()
    print(f"{len(lonely)} public names in no public signature and no user-facing text")
    for p in lonely:
        print("  " + p)
    sys.exit(1 if lonely else 0)
