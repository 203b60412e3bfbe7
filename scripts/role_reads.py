#!/usr/bin/env python3
"""The roles' boundaries: which role reads which other role's variables, and whether each read is declared.

  scripts/role_reads.py            check every role under roles/ (exit 1 on a problem; `make lint` runs this)
  scripts/role_reads.py --list     print every cross-role read found, declared or not, and the counts
  scripts/role_reads.py --roles D  check the roles in directory D instead (the unit tests plant bad roles there)

A variable belongs to the role whose name prefixes it (``server_tp`` to ``server``, ``llmops_*`` to
``llmops_defaults``; the longest matching role name wins). A role reads another role's variable when a Jinja
expression in its tasks, handlers, defaults, vars, meta dependencies or templates names it: as a variable, as
``hostvars[h].NAME`` or ``hostvars[h]['NAME']``, as a string naming a variable the owner defines
(``selectattr('NAME')``, ``map(attribute='NAME')``, ``extract(hostvars, 'NAME')``), or through a filter that reads
host variables by name (``fleet_topology``: sglang_topology.HOST_VARIABLES).

The convention, in ``meta/argument_specs.yml`` (any entry point; ansible-core validates these options at the role's
start like any other, and ansible-lint's schema accepts them, since only the description carries the marker):

* the reader lists the variable as an option whose description has the line ``Read from role OWNER.``;
* the owner lists it as an option whose description has the line ``Read by roles: A, B.`` naming exactly the roles
  that read it (so the owner's documentation cannot drift from the code); a variable the owner sets at run time
  (``set_fact``/``register``) rather than takes as input also has the line ``Published by this role at run time.``

Problems reported (each one line):

* an undeclared cross-role read (the reader does not declare it, or the owner does not list the reader);
* a declaration of a read that the code does not make (stale);
* a role that sets another role's variable with ``set_fact`` or ``register``;
* a role that reads another role's files by path (``role_path ~ '/../'``, ``../other/``, ``roles/other/...``).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import jinja2.meta
import jinja2.nodes as jn
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # ansible_collections/llmops/sglang is this checkout (a checked-in symlink)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import HOST_VARIABLES  # noqa: E402

# Filters that read host variables by name: a call reads each of them.
FILTER_READS = {"fleet_topology": HOST_VARIABLES}
# The shared role owns the llmops_* namespace (kubespray's kubespray_defaults pattern).
PREFIX_OWNER = {"llmops": "llmops_defaults"}
# Keys whose string value is a bare Jinja expression (no braces).
BARE_KEYS = {"when", "failed_when", "changed_when", "until", "that"}
READ_FROM = re.compile(r"^Read from role ([a-z0-9_]+)\.$")
READ_BY = re.compile(r"^Read by roles?: ([a-z0-9_, ]+)\.$")
PUBLISHED = "Published by this role at run time."
PATH_SUBDIRS = "defaults|vars|tasks|files|templates|meta|handlers"


class _AnyName(dict):
    """Every filter or test name exists: only the syntax matters here (Ansible brings its own plugins)."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return lambda *a, **k: None

    def get(self, key, default=None):
        return self[key]


ENV = jinja2.Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])
ENV.filters = _AnyName()
ENV.tests = _AnyName()


@dataclass(frozen=True)
class Read:
    reader: str
    name: str
    owner: str
    where: str  # file:line of the first read


@dataclass
class Role:
    name: str
    path: Path
    defined: set[str] = field(default_factory=set)  # variables the role defines (defaults, vars, set_fact, register)
    sets: dict[str, str] = field(default_factory=dict)  # set_fact/register name -> where
    reads: dict[str, str] = field(default_factory=dict)  # name -> where (first)
    const_reads: dict[str, str] = field(default_factory=dict)  # string constants that may name a variable
    by_path: list[str] = field(default_factory=list)
    declared_reads: dict[str, str] = field(default_factory=dict)  # name -> owner named by "Read from role"
    declared_readers: dict[str, set[str]] = field(default_factory=dict)  # name -> roles named by "Read by roles"
    published: set[str] = field(default_factory=set)
    options: set[str] = field(default_factory=set)


def roles_in(directory: Path) -> dict[str, Role]:
    return {
        p.name: Role(p.name, p)
        for p in sorted(directory.iterdir())
        if p.is_dir() and ((p / "tasks").is_dir() or (p / "defaults").is_dir() or (p / "meta").is_dir())
    }


def owner_of(name: str, roles: dict[str, Role]) -> str | None:
    """The role whose name prefixes the variable (the longest match), or None."""
    best = None
    for prefix, owner in [(r, r) for r in roles] + list(PREFIX_OWNER.items()):
        if owner in roles and name.startswith(prefix + "_") and (best is None or len(prefix) > len(best[0])):
            best = (prefix, owner)
    return best[1] if best else None


# -- Jinja ------------------------------------------------------------------------------------------------------
def _hostvars_item(node) -> bool:
    """node is hostvars[...] (a Getitem on the name hostvars)."""
    return isinstance(node, jn.Getitem) and isinstance(node.node, jn.Name) and node.node.name == "hostvars"


def expression_reads(source: str) -> tuple[set[str], set[str]]:
    """(variables read, string constants) of one Jinja template text."""
    ast = ENV.parse(source)
    names = set(jinja2.meta.find_undeclared_variables(ast))
    for node in ast.find_all(jn.Filter):
        names.update(FILTER_READS.get(node.name.rsplit(".", 1)[-1], ()))
    consts = set()
    for node in ast.find_all((jn.Getattr, jn.Getitem, jn.Const)):
        if isinstance(node, jn.Getattr) and _hostvars_item(node.node):
            names.add(node.attr)
        elif isinstance(node, jn.Getitem) and _hostvars_item(node.node) and isinstance(node.arg, jn.Const):
            if isinstance(node.arg.value, str):
                names.add(node.arg.value)
        elif isinstance(node, jn.Const) and isinstance(node.value, str):
            consts.add(node.value)
    return names, consts


PATH_KEYS = {"file", "src", "include_vars", "include_tasks", "import_tasks", "vars_files", "template", "path"}
_ROLE_PATH = r"roles/[a-z0-9_]+/(" + PATH_SUBDIRS + ")/"


def _by_path(text: str, key: str | None) -> bool:
    """Does this string reach into another role's directory by a file path?"""
    if "role_path" in text and "/.." in text:
        return True
    if key in PATH_KEYS and re.search(r"(^|/)\.\./|(^|/)" + _ROLE_PATH, text):
        return True
    return bool(re.search(r"\b(lookup|query)\([^)]*?(\.\./|" + _ROLE_PATH + ")", text))


def _scan_text(role: Role, source: str, where: str, key: str | None = None, template: bool = False) -> None:
    """Record the reads of one string: a bare expression (when:), a templated value, or a whole template file."""
    bare = key in BARE_KEYS
    text = "{{ (" + source + ") }}" if bare else source
    if template or bare or "{{" in source or "{%" in source:
        try:
            names, consts = expression_reads(text)
        except jinja2.TemplateSyntaxError as exc:
            raise SystemExit(f"{where}: cannot parse Jinja ({exc.message})") from None
        for n in names:
            role.reads.setdefault(n, where)
        for c in consts:
            role.const_reads.setdefault(c, where)
    if _by_path(source, key):
        role.by_path.append(where)


class _Loader(yaml.SafeLoader):
    """YAML loader that keeps each scalar's line (for the messages)."""


def _construct_str(loader, node):
    value = loader.construct_scalar(node)
    return _Str(value, node.start_mark.line + 1)


class _Str(str):
    def __new__(cls, value, line):
        obj = super().__new__(cls, value)
        obj.line = line
        return obj


_Loader.add_constructor("tag:yaml.org,2002:str", _construct_str)


def _walk(role: Role, data, rel: str, key: str | None = None):
    if isinstance(data, dict):
        for k, v in data.items():
            _walk(role, v, rel, str(k))
        _record_sets(role, data, rel)
    elif isinstance(data, list):
        for item in data:
            _walk(role, item, rel, key)
    elif isinstance(data, str):
        _scan_text(role, str(data), f"{rel}:{getattr(data, 'line', '?')}", key)


def _record_sets(role: Role, task: dict, rel: str) -> None:
    line = next((getattr(v, "line", None) for v in task.values() if hasattr(v, "line")), "?")
    for module in ("ansible.builtin.set_fact", "set_fact"):
        if isinstance(task.get(module), dict):
            for name in task[module]:
                if name != "cacheable":
                    role.defined.add(str(name))
                    role.sets.setdefault(str(name), f"{rel}:{line}")
    if "register" in task and isinstance(task["register"], str):
        role.defined.add(str(task["register"]))
        role.sets.setdefault(str(task["register"]), f"{rel}:{line}")
    loop_control = task.get("loop_control")
    if isinstance(loop_control, dict) and isinstance(loop_control.get("loop_var"), str):
        role.defined.add(str(loop_control["loop_var"]))
    if isinstance(task.get("vars"), dict):
        role.defined.update(str(k) for k in task["vars"])


def _description_lines(option: dict) -> list[str]:
    desc = option.get("description", [])
    return [str(d).strip() for d in (desc if isinstance(desc, list) else [desc])]


def scan_role(role: Role) -> None:
    for sub in ("defaults", "vars"):
        for f in sorted((role.path / sub).glob("*.yml")) if (role.path / sub).is_dir() else []:
            data = yaml.load(f.read_text(), Loader=_Loader) or {}
            role.defined.update(str(k) for k in data)
            rel = str(f.relative_to(role.path.parent))
            for k, v in data.items():
                _walk(role, v, rel, str(k))
    for sub in ("tasks", "handlers"):
        for f in sorted((role.path / sub).rglob("*.yml")) if (role.path / sub).is_dir() else []:
            rel = str(f.relative_to(role.path.parent))
            _walk(role, yaml.load(f.read_text(), Loader=_Loader) or [], rel)
    meta_main = role.path / "meta" / "main.yml"
    if meta_main.exists():
        deps = (yaml.load(meta_main.read_text(), Loader=_Loader) or {}).get("dependencies") or []
        _walk(role, deps, str(meta_main.relative_to(role.path.parent)))
    tdir = role.path / "templates"
    for f in sorted(tdir.rglob("*")) if tdir.is_dir() else []:
        if f.is_file():
            _scan_text(role, f.read_text(), str(f.relative_to(role.path.parent)), template=True)
    spec_file = role.path / "meta" / "argument_specs.yml"
    if spec_file.exists():
        spec = yaml.safe_load(spec_file.read_text()) or {}
        for entry in (spec.get("argument_specs") or {}).values():
            for name, option in ((entry or {}).get("options") or {}).items():
                role.options.add(name)
                for line in _description_lines(option or {}):
                    m = READ_FROM.match(line)
                    if m:
                        role.declared_reads[name] = m.group(1)
                    m = READ_BY.match(line)
                    if m:
                        role.declared_readers[name] = {r.strip() for r in m.group(1).split(",") if r.strip()}
                    if line == PUBLISHED:
                        role.published.add(name)


def cross_reads(roles: dict[str, Role]) -> list[Read]:
    """Every read of another role's variable, one per (reader, variable)."""
    out = []
    for role in roles.values():
        seen = {}
        for name, where in role.reads.items():
            owner = owner_of(name, roles)
            if owner and owner != role.name:
                seen[name] = Read(role.name, name, owner, where)
        for const, where in role.const_reads.items():
            if const in seen or not re.fullmatch(r"[a-z][a-z0-9_]*", const):
                continue
            owner = owner_of(const, roles)
            if owner and owner != role.name and (const in roles[owner].defined or const in roles[owner].options):
                seen[const] = Read(role.name, const, owner, where)
        out.extend(seen[n] for n in sorted(seen))
    return out


def problems(roles: dict[str, Role]) -> tuple[list[str], list[Read], list[Read]]:
    """(problems, every cross-role read, the undeclared ones)."""
    for role in roles.values():
        scan_role(role)
    reads = cross_reads(roles)
    out, undeclared = [], []
    readers_of: dict[tuple[str, str], set[str]] = {}
    for r in reads:
        readers_of.setdefault((r.owner, r.name), set()).add(r.reader)
        reader, owner = roles[r.reader], roles[r.owner]
        missing = []
        if reader.declared_reads.get(r.name) != r.owner:
            missing.append(
                f"{r.reader}'s meta/argument_specs.yml has no option {r.name} with the line 'Read from role {r.owner}.'"
            )
        if r.reader not in owner.declared_readers.get(r.name, set()):
            missing.append(
                f"{r.owner}'s meta/argument_specs.yml does not name {r.reader} in 'Read by roles:' of {r.name}"
            )
        if missing:
            undeclared.append(r)
            out.append(f"{r.where}: undeclared cross-role read of {r.name} (role {r.owner}): " + "; ".join(missing))
    for role in roles.values():
        for name, owner in sorted(role.declared_reads.items()):
            if owner not in roles:
                out.append(f"{role.name}: {name} is declared 'Read from role {owner}.', but there is no role {owner}")
            elif role.name not in readers_of.get((owner, name), set()):
                out.append(
                    f"{role.name}: {name} is declared 'Read from role {owner}.', but {role.name} does not read it"
                )
        for name, declared in sorted(role.declared_readers.items()):
            actual = readers_of.get((role.name, name), set())
            if declared != actual:
                out.append(
                    f"{role.name}: 'Read by roles:' of {name} names {', '.join(sorted(declared)) or 'none'}; "
                    f"the roles that read it are {', '.join(sorted(actual)) or 'none'}"
                )
        for name in sorted(role.published):
            if name not in role.sets:
                out.append(f"{role.name}: {name} is declared '{PUBLISHED}' but the role never sets it")
        for name, where in sorted(role.sets.items()):
            owner = owner_of(name, roles)
            if owner and owner != role.name:
                out.append(f"{where}: {role.name} sets {name}, a variable of role {owner} (set_fact/register)")
        for where in role.by_path:
            out.append(f"{where}: {role.name} reads another role's files by path (use that role's variables instead)")
    return out, reads, undeclared


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--roles", type=Path, default=ROOT / "roles", help="directory of the roles (default roles/)")
    parser.add_argument("--list", action="store_true", help="print every cross-role read and the counts")
    args = parser.parse_args(argv)
    roles = roles_in(args.roles)
    found, reads, undeclared = problems(roles)
    if args.list:
        for r in reads:
            mark = "UNDECLARED" if r in undeclared else "declared"
            print(f"{r.reader:16} reads {r.name:38} of {r.owner:16} {mark:10} {r.where}")
        print(f"role_reads: {len(reads)} cross-role reads, {len(undeclared)} undeclared, {len(roles)} roles")
    for p in found:
        print(p, file=sys.stderr)
    if not args.list:
        print(
            f"role_reads: {len(roles)} roles, {len(reads)} cross-role reads, {len(undeclared)} undeclared, "
            f"{len(found)} problem(s)"
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
