"""Tenants, users, API keys, passwords and UI sessions (part of the application service layer).

    roles.py        Principal (who someone is) and what each role may do
    accounts.py     tenants and their settings, users (roles, groups, credentials), the audit log
    credentials.py  API keys, passwords (policy, scrypt), throttled logins, UI sessions

`Principals` is the one object the entry points use: each call is its part's own bound method.
"""

from __future__ import annotations

from ...store import AccountsTx
from ..port import KernelPort
from .accounts import TENANT_SETTINGS, Accounts
from .credentials import Credentials, check_password_policy
from .roles import GRANTS, ROLES, Principal

__all__ = ["GRANTS", "ROLES", "TENANT_SETTINGS", "Principal", "Principals", "check_password_policy"]


class Principals:
    def __init__(self, kernel: KernelPort[AccountsTx]) -> None:
        self.kernel = kernel
        accounts = Accounts(kernel)
        credentials = Credentials(kernel)

        # Tenants, users and the audit log.
        self.create_tenant = accounts.create_tenant
        self.set_tenant = accounts.set_tenant
        self.tenants = accounts.tenants
        self.create_user = accounts.create_user
        self.disable_user = accounts.disable_user
        self.enable_user = accounts.enable_user
        self.set_password = accounts.set_password
        self.set_email = accounts.set_email
        self.rotate_key = accounts.rotate_key
        self.set_membership = accounts.set_membership
        self.set_grant = accounts.set_grant
        self.users = accounts.users
        self.principal = accounts.principal
        self.audit = accounts.audit

        # Authentication and sessions.
        self.authenticate_key = credentials.authenticate_key
        self.authenticate_password = credentials.authenticate_password
        self.open_session = credentials.open_session
        self.session = credentials.session
        self.close_session = credentials.close_session
