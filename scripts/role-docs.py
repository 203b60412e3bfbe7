#!/usr/bin/env python3
"""Render each role's variables from meta/argument_specs.yml into its README, and check for drift.

  scripts/role-docs.py           rewrite the generated block of every roles/*/README.md
  scripts/role-docs.py --check   exit 1 if a README block is stale or a default in defaults/main.yml differs
                                 from its argument spec (one source of truth: the spec)

The generated block sits between the BEGIN/END markers; text outside them is written by hand.
"""

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- BEGIN ROLE VARIABLES (generated from meta/argument_specs.yml by scripts/role-docs.py) -->"
END = "<!-- END ROLE VARIABLES -->"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(spec):
    main = spec["argument_specs"]["main"]
    lines = [BEGIN, "", "| Variable | Type | Default | Description |", "|---|---|---|---|"]
    for name, opt in main.get("options", {}).items():
        desc = opt.get("description", "")
        if isinstance(desc, list):
            desc = " ".join(desc)
        if opt.get("choices"):
            desc += " Choices: " + ", ".join(f"`{c}`" for c in opt["choices"]) + "."
        if opt.get("required"):
            default = "(required)"
        else:
            dumped = yaml.safe_dump(opt.get("default"), default_flow_style=True).strip()
            default = f"`{dumped.removesuffix('...').strip()}`"
        lines.append(f"| `{name}` | {opt.get('type', 'str')} | {cell(default)} | {cell(desc)} |")
    lines += ["", END]
    return "\n".join(lines)


def main(check):
    problems = []
    for role in sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta/argument_specs.yml").exists()):
        spec = yaml.safe_load((role / "meta/argument_specs.yml").read_text())
        options = spec["argument_specs"]["main"].get("options", {})
        defaults_file = role / "defaults/main.yml"
        defaults = yaml.safe_load(defaults_file.read_text()) or {} if defaults_file.exists() else {}
        for name, value in defaults.items():
            if name not in options:
                problems.append(f"{role.name}: {name} is in defaults/main.yml but not in meta/argument_specs.yml")
            elif "default" in options[name] and options[name]["default"] != value:
                problems.append(
                    f"{role.name}: default of {name} differs: defaults/main.yml {value!r}, "
                    f"argument_specs {options[name]['default']!r}"
                )
        for name, opt in options.items():
            if not opt.get("required") and name not in defaults:
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
