"""Stop a compat run on a server that does not serve, instead of writing a
cell per probe that says so.

``Watch.saw`` sees every probe request's reply, per arm. It raises
``ServerFailed``, naming the arm and its server, when

- ``FAILURE_STREAK`` requests in a row got no HTTP reply at all (refused,
  reset, timed out: ``Reply.status`` None): the server is down or
  unreachable, and every request after would wait out its timeouts too; or
- the arm's first ``FAILURE_STREAK`` requests all failed, whatever the
  failure (a reset mid-reply, a malformed or refused reply): a probe's first
  request is its plain twin, which every server that serves at all accepts,
  so nothing could be compared and every cell would say the same thing.

The run then ends with that one error (a non-zero exit), the cells measured
before it kept. A server that served and later refuses features is what the
cells are for: its refusals are never counted here once it has served.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec.errors import SpecdecError
from specdec.experiments.compat.replies import Reply
from specdec.http.urls import Endpoint

#: Requests in a row that stop the run (module docstring).
FAILURE_STREAK = 3


class ServerFailed(SpecdecError):
    """One arm's server did not serve: the run stops with this error."""


@dataclass
class Watch:
    limit: int = FAILURE_STREAK
    silent: dict[str, int] = field(default_factory=dict)  # per arm: replies in a row without an HTTP status
    failed: dict[str, int] = field(default_factory=dict)  # per arm: failed replies (counted until one is accepted)
    served: set[str] = field(default_factory=set)  # arms with an accepted reply

    def saw(self, arm: str, ep: Endpoint, reply: Reply) -> None:
        """Count ``reply`` of ``arm``'s server at ``ep``; raise ``ServerFailed`` (module docstring)."""
        if reply.accepted:
            self.served.add(arm)
            self.silent[arm] = 0
            return
        self.silent[arm] = self.silent.get(arm, 0) + 1 if reply.status is None else 0
        self.failed[arm] = self.failed.get(arm, 0) + 1
        last = f"the last: {(reply.error or '')[:300]}"
        if self.silent[arm] >= self.limit:
            raise ServerFailed(
                f"the {arm} server at {ep.display} gave no reply to {self.silent[arm]} requests in a row "
                f"({last}); is it running, and is the URL right? The cells measured before are kept."
            )
        if arm not in self.served and self.failed[arm] >= self.limit:
            raise ServerFailed(
                f"the {arm} server at {ep.display} failed each of its first {self.failed[arm]} requests, the "
                f"plain ones included ({last}): nothing could be compared, so no cell was made of them."
            )
