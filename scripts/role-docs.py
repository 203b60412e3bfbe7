#!/usr/bin/env python3
"""Render each role's variables from meta/argument_specs.yml into its README, and check for drift.

  scripts/role-docs.py           rewrite the generated block of every roles/*/README.md
  scripts/role-docs.py --check   exit 1 if a README block is stale or a default in defaults/main.yml differs
                                 from its argument spec (one source of truth: the spec)

The generated block sits between the BEGIN/END markers; text outside them is written by hand. Options that cross
roles (scripts/role_reads.py: "Read from role X." in the reader's spec, "Published by this role at run time." for
what a role sets for others) are rendered in a second table and carry no default of their own: the owner's applies.
"""

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN ROLE VARIABLES (generated from meta/argument_specs.yml by scripts/role-docs.py) -->"
END = "<!-- END ROLE VARIABLES -->"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


READ_FROM = re.compile(r"^Read from role ([a-z0-9_]+)\.$")
PUBLISHED = "Published by this role at run time."


DOC_ONLY = "(documentation only"


def lines_of(opt):
    desc = opt.get("description", "")
    return [str(d).strip() for d in (desc if isinstance(desc, list) else [desc])]


def crossing(opt):
    """The role this option is read from, 'published' for a fact the role sets for others, or None (an input)."""
    for line in lines_of(opt):
        m = READ_FROM.match(line)
        if m:
            return m.group(1)
    return "published" if PUBLISHED in lines_of(opt) else None


def documented(spec):
    """The role's variables: the main entry point's options and those of its documentation-only entry points (options
    kept out of the main entry point because ansible-core templates every option it validates at the role's start)."""
    eps = spec["argument_specs"]
    out = dict(eps["main"].get("options", {}))
    for name, ep in eps.items():
        if name != "main" and DOC_ONLY in str((ep or {}).get("short_description", "")):
            out.update((ep or {}).get("options", {}))
    return out


def render(spec):
    options = documented(spec)
    own = [(n, o) for n, o in options.items() if crossing(o) is None]
    other = [(n, o) for n, o in options.items() if crossing(o) is not None]
    lines = [BEGIN, "", "| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for name, opt in own:
        desc = " ".join(lines_of(opt))
        if opt.get("choices"):
            desc += " Choices: " + ", ".join(f"`{c}`" for c in opt["choices"]) + "."
        if opt.get("required"):
            default = "(required)"
        else:
            dumped = yaml.safe_dump(opt.get("default"), default_flow_style=True).strip()
            default = f"`{dumped.removesuffix('...').strip()}`"
        lines.append(f"| `{name}` | {opt.get('type', 'str')} | {cell(default)} | {cell(desc)} |")
    if other:
        lines += ["", "Across roles (`scripts/role_reads.py` checks these against the code):", ""]
        lines += ["| Variable | Type | From | Description |", "|---|---|---|---|"]
        for name, opt in other:
            source = crossing(opt)
            origin = "set by this role" if source == "published" else f"role `{source}`"
            desc = " ".join(x for x in lines_of(opt) if not READ_FROM.match(x) and x != PUBLISHED)
            lines.append(f"| `{name}` | {opt.get('type', 'str')} | {origin} | {cell(desc)} |")
    lines += ["", END]
    return "\n".join(lines)


def main(check):
    problems = []
    for role in sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta/argument_specs.yml").exists()):
        spec = yaml.safe_load((role / "meta/argument_specs.yml").read_text())
        options = documented(spec)
        defaults_file = role / "defaults/main.yml"
        defaults = yaml.safe_load(defaults_file.read_text()) or {} if defaults_file.exists() else {}
        derived = {}
        for f in sorted((role / "vars").glob("*.yml")) if (role / "vars").is_dir() else []:
            derived.update(yaml.safe_load(f.read_text()) or {})
        for name, value in defaults.items():
            if name not in options:
                problems.append(f"{role.name}: {name} is in defaults/main.yml but not in meta/argument_specs.yml")
            elif "default" in options[name] and options[name]["default"] != value:
                problems.append(
                    f"{role.name}: default of {name} differs: defaults/main.yml {value!r}, "
                    f"argument_specs {options[name]['default']!r}"
                )
        for name, opt in options.items():
            if crossing(opt) is not None:
                if "default" in opt:
                    problems.append(f"{role.name}: {name} crosses roles and must not repeat a default in the spec")
                continue
            if not opt.get("required") and name not in defaults and name not in derived:
                problems.append(f"{role.name}: {name} is optional in the spec but has no value in defaults/main.yml")
        readme = role / "README.md"
        text = readme.read_text() if readme.exists() else f"# Role {role.name}\n\n## Variables\n\n{BEGIN}\n{END}\n"
        if BEGIN not in text or END not in text:
            problems.append(f"{role.name}: README.md lacks the generated-variables markers")
            continue
        new = text[: text.index(BEGIN)] + render(spec) + text[text.index(END) + len(END) :]
        if new != text:
            if check:
                problems.append(f"{role.name}: README.md variables are stale; run scripts/role-docs.py")
            else:
                readme.write_text(new)
                print(f"rendered {readme.relative_to(ROOT)}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
