"""Regenerates gitleaks.json from a transformed copy of the gitleaks default rules.

Input: the `builtin_rules.json` of the keyspoor crate (crates.io; it holds gitleaks v8.30.1
`config/gitleaks.toml` converted to JSON, see its THIRD_PARTY_NOTICES). Output: one compact file
strata embeds. The transformation, and nothing else:

* the allowlist every rule repeats (the gitleaks global allowlist) is kept once, as `global`,
  without its path patterns (strata scans values, not files);
* per rule: id, pattern, secret_group, keywords (lower case) and min_entropy, plus the rule's own
  allowlists (condition, target, regexes, stopwords) that are not path-only;
* rules that only apply to certain file paths are left out (listed in `path_only`).

Usage: python3 compact.py builtin_rules.json > gitleaks.json
"""

import json
import sys

src = json.load(open(sys.argv[1]))["rules"]
first = src[0]["allowlist"]
glob = [a for a in first if a["paths"]][0]
out_rules, path_only = [], []
for r in src:
    if r["path"]:
        path_only.append(r["id"])
        continue
    own = []
    for a in r["allowlist"] or []:
        if a == glob:
            continue
        if not a["regexes"] and not a["stopwords"]:
            continue
        own.append({k: a[k] for k in ("condition", "target", "regexes", "stopwords")})
    out_rules.append(
        {
            "id": r["id"],
            "pattern": r["pattern"],
            "secret_group": r["secret_group"],
            "keywords": sorted({k.lower() for k in r["keywords"]}),
            "min_entropy": r["min_entropy"],
            "allowlists": own,
        }
    )
doc = {
    "source": "gitleaks v8.30.1 config/gitleaks.toml (commit 83d9cd684c87d95d656c1458ef04895a7f1cbd8e), MIT, via keyspoor 0.1.4",
    "global": {"regexes": glob["regexes"], "stopwords": glob["stopwords"]},
    "path_only": path_only,
    "rules": out_rules,
}
json.dump(doc, sys.stdout, indent=0, ensure_ascii=False, sort_keys=True)
sys.stdout.write("\n")
