"""The command-line options a real SGLang release accepts, read from its wheel (never from a hand-written list).

`options(wheel)` reads `sglang/srt/server_args.py` (and, from 0.5.15, the dataclass field modules under
`sglang/srt/arg_groups/`) of a release's wheel with `ast` -- nothing of the release is imported or executed -- and
returns what `prepare_server_args` builds its `argparse.ArgumentParser` from:

- every `parser.add_argument("--a", "--b", ...)` call in `ServerArgs.add_cli_args` (all releases; the option strings
  are literals in every release checked, 0.4.4 ... 0.5.23: a non-literal one is an error, never a guess);
- from 0.5.15, `add_cli_args_from_dataclass(parser, ServerArgs)`: every field of ServerArgs (0.5.15-0.5.19: the
  class body in server_args.py; from 0.5.20 also the classes named in `_INPUT_NAMESPACES`, resolved through their
  imports, with their bases) annotated `A[T, "help"]` or `A[T, Arg(...)]`: `--field-name` or `Arg(cli_name=...)`,
  plus `Arg(aliases=[...])`, skipped with `Arg(no_cli=True)`. Before using that rule the release's own
  `arg_groups/arg_utils.py` is checked to still derive names that way (`_field_to_cli_name` = "--" +
  name.replace("_", "-"), `no_cli`, `cli_name`, `aliases`); a release that changed it is an error;
- `allow_abbrev` and `prog` of the `ArgumentParser(...)` call in `prepare_server_args` (argparse's default: True).

Each option also gets its arity (0: a switch such as store_true; 1: one value; "+": one or more), which is all a
parser needs to tell an unknown or ambiguous option from a known one: the SGLang stand-in builds that parser
(sim/sglang/python/sglang/srt/sim_release_options.py) from `table(...)`, written into its tree at mirror-build time.
Works on a wheel or an sdist (`sglang-X.tar.gz`, whose root is upstream's python/).

    python3 sim/mirrors/sglang_cli.py ARTIFACT...      # JSON: {version: spec}
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path

SERVER_ARGS = "sglang/srt/server_args.py"
ARG_UTILS = "sglang/srt/arg_groups/arg_utils.py"
_WHEEL = re.compile(r"^sglang-(\d+(?:\.\d+)*(?:\.post\d+)?)(?:-|\.tar\.gz$)")
_ZERO_ARG_ACTIONS = ("store_true", "store_false", "store_const", "count", "help", "version")


class ExtractError(ValueError):
    pass


def wheel_version(path) -> str:
    m = _WHEEL.match(Path(path).name)
    if not m:
        raise ExtractError(f"{path}: not an sglang wheel")
    return m.group(1)


def _const_strings(node):
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
                raise ExtractError(f"non-literal option name {ast.unparse(e)}")
            out.append(e.value)
        return out
    raise ExtractError(f"non-literal option list {ast.unparse(node)}")


def _kw(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _action_arity(action):
    """Arity of an argparse action given as a string or a class name."""
    if action is None:
        return None
    if isinstance(action, ast.Constant) and isinstance(action.value, str):
        return 0 if action.value in _ZERO_ARG_ACTIONS else 1
    name = ast.unparse(action).rsplit(".", 1)[-1]
    if name == "BooleanOptionalAction":
        return "bool-optional"
    if re.search(r"Store(True|False|Const)", name):
        return 0
    return 1


def _arity_of_call(call):
    act = _action_arity(_kw(call, "action"))
    nargs = _kw(call, "nargs")
    if isinstance(nargs, ast.Constant) and nargs.value is not None:
        return nargs.value if nargs.value in ("+", "*", "?") else int(nargs.value)
    if act is not None:
        if act == 0 and nargs is not None and not (isinstance(nargs, ast.Constant) and nargs.value is None):
            return 1
        return act
    return 1


def _function(tree, cls, name):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef) and sub.name == name:
                    return sub
    return None


def _explicit(fn, where):
    """Options of the `.add_argument(...)` calls in a function."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = []
            for a in node.args:
                if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
                    raise ExtractError(f"{where}:{node.lineno}: non-literal option name {ast.unparse(a)}")
                names.append(a.value)
            if not names or not names[0].startswith("-"):
                raise ExtractError(f"{where}:{node.lineno}: add_argument without an option string")
            out.append({"names": names, "arity": _arity_of_call(node), "line": node.lineno, "file": where})
    return out


def _check_arg_utils(src):
    """The release derives CLI names from dataclass fields the way this module assumes, or ExtractError."""
    tree = ast.parse(src)
    fn = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_field_to_cli_name"),
        None,
    )
    body = ast.unparse(fn) if fn else ""
    if "'--' + name.replace('_', '-')" not in body:
        raise ExtractError(f"{ARG_UTILS}: _field_to_cli_name no longer returns '--' + name.replace('_', '-')")
    add = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args_from_dataclass"),
        None,
    )
    text = ast.unparse(add) if add else ""
    for needle in ("arg_meta.no_cli", "arg_meta.cli_name", "arg_meta.aliases"):
        if needle not in text:
            raise ExtractError(f"{ARG_UTILS}: add_cli_args_from_dataclass no longer reads {needle}")


def _annotation_meta(ann):
    """(inner type node, Arg call or help string or None) of an `A[T, ...]` / `Annotated[T, ...]` annotation."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return None, None
    if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value).rsplit(".", 1)[-1] in ("A", "Annotated")):
        return None, None
    elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
    inner, meta = elts[0], None
    for e in elts[1:]:
        if isinstance(e, ast.Call) and ast.unparse(e.func).rsplit(".", 1)[-1] == "Arg":
            meta = e
            break
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            meta = e.value
            break
    return inner, meta


def _field_arity(inner, arg):
    text = ast.unparse(inner) if inner is not None else ""
    if arg is not None and not isinstance(arg, str):
        act = _action_arity(_kw(arg, "action"))
        if act is not None:
            return act
        nargs = _kw(arg, "nargs")
        if isinstance(nargs, ast.Constant) and nargs.value is not None:
            return nargs.value
    core = re.sub(r"^(Optional\[(.*)\]|(.*)\s*\|\s*None)$", r"\2\3", text.strip())
    if core == "bool":
        return 0
    if re.match(r"^(List|list)\[", core) and not (
        arg is not None and not isinstance(arg, str) and _kw(arg, "type_parser")
    ):
        return "+"
    return 1


def _dataclass_fields(cls_node, where):
    """CLI options of a dataclass/Struct body; a field annotated twice keeps its last annotation (as dataclasses
    do: the class namespace is a dict)."""
    out = {}
    for node in cls_node.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        inner, arg = _annotation_meta(node.annotation)
        if arg is None:
            continue
        name = node.target.id
        aliases, cli_name = [], None
        if not isinstance(arg, str):
            no_cli = _kw(arg, "no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                continue
            cn = _kw(arg, "cli_name")
            if cn is not None:
                if not (isinstance(cn, ast.Constant) and isinstance(cn.value, str)):
                    raise ExtractError(f"{where}:{node.lineno}: non-literal cli_name")
                cli_name = cn.value
            al = _kw(arg, "aliases")
            if al is not None and not (isinstance(al, ast.Constant) and al.value is None):
                aliases = _const_strings(al)
        names = [cli_name or "--" + name.replace("_", "-"), *aliases]
        out[name] = {"names": names, "arity": _field_arity(inner, arg), "line": node.lineno, "file": where}
    return out


class _Wheel:
    """The files of a wheel, or of an sdist with its top directory stripped (both: `sglang/...`)."""

    def __init__(self, path):
        self.path = Path(path)
        self.files = {}
        if self.path.name.endswith(".tar.gz"):
            with tarfile.open(self.path) as tar:
                for m in tar.getmembers():
                    parts = m.name.split("/", 1)
                    if m.isfile() and len(parts) == 2 and parts[1].startswith("sglang/") and m.name.endswith(".py"):
                        self.files[parts[1]] = tar.extractfile(m).read()
        else:
            with zipfile.ZipFile(self.path) as z:
                for n in z.namelist():
                    if n.startswith("sglang/") and n.endswith(".py"):
                        self.files[n] = z.read(n)
        self.names = set(self.files)

    def read(self, name):
        return self.files[name].decode("utf-8")

    def module_file(self, module):
        base = module.replace(".", "/")
        for cand in (base + ".py", base + "/__init__.py"):
            if cand in self.names:
                return cand
        return None


def _classes_of(wheel, module_file, wanted, seen):
    """ClassDef nodes named `wanted` in module_file, following `from X import name` and base classes."""
    tree = ast.parse(wheel.read(module_file))
    out = []
    local = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    imports = {}
    for n in tree.body:
        if isinstance(n, ast.ImportFrom) and n.module:
            for a in n.names:
                imports[a.asname or a.name] = (n.module, a.name)
    for name in wanted:
        key = (module_file, name)
        if key in seen:
            continue
        seen.add(key)
        if name in local:
            node = local[name]
            bases = [ast.unparse(b) for b in node.bases]
            out.extend(_classes_of(wheel, module_file, [b for b in bases if b in local or b in imports], seen))
            out.append((module_file, node))
        elif name in imports:
            mod, real = imports[name]
            f = wheel.module_file(mod)
            if f is not None:
                out.extend(_classes_of(wheel, f, [real], seen))
    return out


def options(wheel_path) -> dict:
    """{version, prog, allow_abbrev, options: [{names, arity, file, line}]} of one release's server CLI."""
    w = _Wheel(wheel_path)
    version = wheel_version(wheel_path)
    src = w.read(SERVER_ARGS)
    tree = ast.parse(src)
    add = _function(tree, "ServerArgs", "add_cli_args")
    if add is None:
        raise ExtractError(f"{version}: no ServerArgs.add_cli_args in {SERVER_ARGS}")
    opts = _explicit(add, SERVER_ARGS)
    if "add_cli_args_from_dataclass" in ast.unparse(add):
        _check_arg_utils(w.read(ARG_UTILS))
        seen = set()
        classes = _classes_of(w, SERVER_ARGS, ["ServerArgs"], seen)
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets)
                and isinstance(node.value, (ast.List, ast.Tuple))
            ):
                classes += _classes_of(w, SERVER_ARGS, [ast.unparse(e) for e in node.value.elts], seen)
        fields = {}
        for where, cls in classes:  # bases first: a field a subclass annotates again keeps the subclass's
            fields.update(_dataclass_fields(cls, where))
        opts += list(fields.values())
    allow_abbrev, prog = True, None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "prepare_server_args":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("ArgumentParser"):
                    ab, pg = _kw(call, "allow_abbrev"), _kw(call, "prog")
                    if ab is not None:
                        allow_abbrev = bool(ast.literal_eval(ab))
                    if isinstance(pg, ast.Constant):
                        prog = pg.value
    seen_names = {}
    for o in opts:
        if o["arity"] == "bool-optional":
            o["arity"] = 0
            o["names"] = o["names"] + ["--no-" + n[2:] for n in o["names"] if n.startswith("--")]
        for n in o["names"]:
            if n in seen_names:
                raise ExtractError(f"{version}: option {n} registered twice ({seen_names[n]}, {o['file']}:{o['line']})")
            seen_names[n] = f"{o['file']}:{o['line']}"
    return {"version": version, "prog": prog, "allow_abbrev": allow_abbrev, "options": opts}


def option_names(spec):
    return sorted(n for o in spec["options"] for n in o["names"])


def table(artifacts, default=None) -> dict:
    """The stand-in's option table: {"default": release, "releases": {version: spec}} for the given wheels/sdists."""
    releases = {}
    for a in artifacts:
        spec = options(a)
        releases[spec["version"]] = spec
    return {"default": default, "releases": releases}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", nargs="+")
    args = ap.parse_args(argv)
    out = {}
    for w in args.wheels:
        spec = options(w)
        out[spec["version"]] = spec
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
