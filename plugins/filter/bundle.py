# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.bundle_target, bundle_release, bundle_apt_source, bundle_problems, bundle_host_problems (docs:
plugins/filter/NAME.yml).

The knowledge lives in module_utils/bundle_manifest.py, bundle_apt.py and inventory_values.py; this file only adapts
it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_apt as _apt
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as _manifest
from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values as _values


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if value is not None and not isinstance(value, (bool, int, float)) else value


def bundle_target(target):
    """{target, problem}: the bundle's target in its canonical form, or the sentence that refuses it."""
    try:
        return {"target": _manifest.check_target(_plain(target)), "problem": ""}
    except _manifest.ManifestError as e:
        return {"target": None, "problem": str(e)}


def bundle_release(facts):
    """The host's OS release as a bundle's target names it (ubuntu-24.04, debian-12); '' when bundles know none."""
    return _manifest.release_of(_plain(dict(facts or {})))


def bundle_apt_source(bundle_dir, release, url=False):
    """The apt source line of the bundle's package files for ``release`` on a host with the bundle at ``bundle_dir``
    (with ``url``: the repository's URL)."""
    return (_apt.index_url if url else _apt.source_line)(str(bundle_dir), str(release))


def bundle_host_problems(target, host):
    """What keeps this host (``host``: the target's keys for it) from installing a bundle made for ``target``, one
    clause each; empty when it may, or when the bundle names no target."""
    if not target:
        return []
    return _manifest.target_problems(_plain(dict(target)), _plain(dict(host or {})))


def bundle_problems(bundle_dir, public_key):
    """The sentences that refuse the inventory's offline-bundle settings (empty: none, or no bundle asked for)."""
    if not bundle_dir:
        return []
    problem = _values.path_problem("llmops_bundle_dir", bundle_dir, example="/srv/llmops-bundle")
    if problem:
        return [problem]
    if not isinstance(public_key, str) or not _manifest.PUBLIC_KEY.match(public_key.strip()):
        return ["Expected llmops_bundle_public_key to be the one line of the bundle's signing key's .pub file "
                "(ssh-ed25519 AAAA... name) when llmops_bundle_dir is set; found %s. Set it to the public key the "
                "bundle was signed with." % ("nothing" if not public_key else "another value")]  # fmt: skip
    return []


class FilterModule(object):
    def filters(self):
        return {
            "bundle_target": bundle_target,
            "bundle_release": bundle_release,
            "bundle_apt_source": bundle_apt_source,
            "bundle_problems": bundle_problems,
            "bundle_host_problems": bundle_host_problems,
        }
