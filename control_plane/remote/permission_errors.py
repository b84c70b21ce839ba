"""The typed refusals of a permission answer (``permissions.py``): the console's HTTP answer
maps them to 404, 400 and 409 (``console_permissions.py``); an ACP client whose answer lost
is sent ``$/cancel_request`` with ``_meta.acpctl.reason = "already_answered"``."""

from __future__ import annotations

from state_machines import ControlPlaneError
from store.queries.permissions import PermissionRecord


class PermissionAlreadyAnswered(ControlPlaneError):
    """The request was settled before this answer (another client's answer won, on this node
    or another, or the request was withdrawn): how it was settled, as recorded."""

    code = "already_answered"

    def __init__(self, record: PermissionRecord) -> None:
        self.request_id = record.id
        self.state = record.state  # answered or withdrawn
        self.option_id = record.option_id
        self.decided_by = record.decided_by
        how = (
            f"answered {self.option_id or 'cancelled'} by {self.decided_by}"
            if self.state == "answered"
            else self.state
        )
        super().__init__(f"permission request {self.request_id} was already {how}")


class PermissionNotFound(ControlPlaneError):
    """No permission request by that id in that session."""

    def __init__(self, session_id: str, request_id: str) -> None:
        self.session_id = session_id
        self.request_id = request_id
        super().__init__(f"session {session_id} has no permission request {request_id}")


class PermissionAnswerInvalid(ControlPlaneError):
    """An answer that is none of the request's options (nothing is recorded)."""

    def __init__(self, request_id: str, option_id: str, valid: list[str]) -> None:
        self.request_id = request_id
        self.option_id = option_id
        self.valid = valid
        super().__init__(
            f"{option_id!r} is not an option of permission request {request_id} "
            f"(options: {', '.join(valid)}; or cancelled)"
        )
