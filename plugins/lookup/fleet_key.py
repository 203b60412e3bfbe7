# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: fleet_key
version_added: 0.3.0
short_description: A key of the fleet kept on the controller, generated once, private from its creation
description:
  - Returns the key kept in the file C(NAME.txt) inside O(directory), NAME being a term; when the file is absent a
    new key of O(length) ASCII letters and digits is generated and kept there.
  - The C(.txt) ending keeps Ansible from reading the key as an inventory host when the directory lies inside an
    inventory directory (Ansible reads every other file there as an inventory source); a key file of an earlier
    release without it is renamed to it the first time it is read.
  - The directory is created 0700, and an existing one of this user is made 0700 again (a credentials directory
    created by hand or by a checkout with a wider mode keeps no key readable to others). One owned by another user,
    or a symlink in its place, is refused.
  - A new key is written to a 0600 temporary file (created with O_EXCL and O_NOFOLLOW) and linked to its name, so the
    key file exists only whole and only 0600, and two processes generating the same key at once both return the one
    linked first. An existing key file that is not a regular file of this user is refused; one readable by others
    is made 0600.
  - The file holds the key on its first line, as C(ansible.builtin.password) writes it, so keys that lookup made are
    read unchanged (and renamed as above).
  - Reads C(plugins/module_utils/private_files.py), the one home of these rules.
options:
  _terms:
    description: The key's name (its file is NAME.txt; no directory part), one per term.
    type: list
    elements: str
    required: true
  directory:
    description: The directory holding the keys (the inventory's C(credentials/) by default, C(llmops_credentials_dir)).
    type: path
    required: true
  length:
    description: Length of a new key.
    type: int
    default: 40
  value:
    description:
      - The key to keep when the file is absent, instead of a new one - a key the running fleet already holds, taken
        from its hosts by a control node that had none. An existing file is never replaced.
    type: str
  create:
    description: With V(false), an absent key is not generated and the lookup returns an empty string for it.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Read (or generate once) the router's client key
  ansible.builtin.set_fact:
    router_key: "{{ lookup('llmops.sglang.fleet_key', 'router-api-key', directory=llmops_credentials_dir) }}"
  no_log: true
"""

RETURN = r"""
_raw:
  description: The keys, one per term.
  type: list
  elements: str
"""

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmops.sglang.plugins.module_utils.private_files import fleet_key


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        directory, length, value = self.get_option("directory"), self.get_option("length"), self.get_option("value")
        create = self.get_option("create")
        if not isinstance(length, int) or length < 16:
            raise AnsibleError(
                "expected length to be an integer of at least 16; found %r. Leave it out for 40." % (length,)
            )
        keys = []
        for term in terms:
            try:
                keys.append(fleet_key(directory, str(term), length, value=value, create=create))
            except (OSError, ValueError) as exc:
                raise AnsibleError(
                    "expected a private key file %s in %s; found a problem: %s. Fix the directory or the file "
                    "(keys are kept 0600 in a 0700 directory of the controller's user)." % (term, directory, exc)
                ) from None
        return keys
