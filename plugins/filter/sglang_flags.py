# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.sglang_release_layout, sglang_server_argv, sglang_own_flags, sglang_guarded_args (docs: *.yml).

The knowledge lives in module_utils/sglang_flags.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_flags


def _version(version):
    v = str(version or "").strip()
    return v or "main"


def _per_release(name, func, version, *args):
    """func(release, *args) with sglang_flags' FlagError turned into the filter's one-line error."""
    try:
        return func(_version(version), *args)
    except sglang_flags.FlagError as exc:
        raise AnsibleFilterError("%s: %s" % (name, exc)) from None


def sglang_release_layout(version):
    """sglang_flags.layout(): SM120 fix file, compiled extensions and server flags of the release ``version``."""
    return _per_release("sglang_release_layout", sglang_flags.layout, version)


def sglang_server_argv(values, version):
    """The launch_server argv for ``values`` ({option: value}) in the flags of the release ``version``."""
    if not isinstance(values, dict):
        raise AnsibleFilterError(
            "sglang_server_argv: expected a dict of options such as {'model_path': ..., 'tp_size': 8}; found %s"
            % type(values).__name__
        )
    return _per_release("sglang_server_argv", sglang_flags.server_argv, version, values)


def sglang_own_flags(version):
    """{flag: option} of every spelling that sets one of the collection's own options in the release ``version``."""
    return _per_release("sglang_own_flags", sglang_flags.own_flags, version)


def sglang_guarded_args(args, own, keyed=None):
    """[{arg, flag, secret, unsafe}]: the words of ``args`` that set a secret flag or a flag of ``own`` (prefixes
    too); with ``keyed`` (true or false: the server has a key) also the server flags that are never safe."""
    if not isinstance(own, dict):
        raise AnsibleFilterError("sglang_guarded_args: expected sglang_own_flags' dict; found %s" % type(own).__name__)
    unsafe = None if keyed is None else sglang_flags.unsafe_flags(bool(keyed))
    return sglang_flags.guarded_args(list(args) if isinstance(args, (list, tuple)) else [], own, unsafe)


class FilterModule(object):
    def filters(self):
        return {
            "sglang_release_layout": sglang_release_layout,
            "sglang_server_argv": sglang_server_argv,
            "sglang_own_flags": sglang_own_flags,
            "sglang_guarded_args": sglang_guarded_args,
        }
