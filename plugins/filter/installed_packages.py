# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.installed_packages, packages_missing and deb_package (docs: plugins/filter/*.yml).

The knowledge lives in module_utils/installed_packages.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.sglang.plugins.module_utils import installed_packages as _packages


def installed_packages(text):
    """{package: version} of the installed packages in dpkg-query output."""
    return _packages.parse(text if isinstance(text, str) else "")


def deb_package(path):
    """``name=version`` of a package file named the Debian way, or the path itself."""
    return _packages.deb_entry(path)


def packages_missing(wanted, installed):
    """The entries of ``wanted`` that are not installed as asked (all of them when nothing was read)."""
    return _packages.missing(wanted, installed)


class FilterModule(object):
    def filters(self):
        return {
            "deb_package": deb_package,
            "installed_packages": installed_packages,
            "packages_missing": packages_missing,
        }
