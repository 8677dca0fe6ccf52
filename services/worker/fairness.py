"""Fair admission of jobs, per namespace (the tenant-isolated queue pattern).

Each namespace may have at most `slots` jobs in the shared work queue or
running; the rest wait in the namespace's own FIFO list. When a job ends, its
slot goes to the next waiting job of the same namespace, which joins the tail
of the shared FIFO queue. So a job submitted to namespace B has at most
`slots x (active namespaces - 1)` jobs of other namespaces ahead of it, plus
the jobs already running, however many documents namespace A has queued.

`RedisGate` keeps the lists in Redis (shared by gateways and Celery workers,
updated by Lua scripts so admission is atomic); `LocalGate` keeps them in
memory for the in-process queue. Both hand back the job ids to dispatch now.
"""

from __future__ import annotations

import threading
from collections import deque

# KEYS[1] = waiting list, KEYS[2] = running set; ARGV[1] = slots, ARGV[2] = job id to add ('' = none),
# ARGV[3] = job id that finished ('' = none). Returns the job ids admitted by this call.
_ADMIT = """
if ARGV[3] ~= '' then redis.call('SREM', KEYS[2], ARGV[3]) end
if ARGV[2] ~= '' then redis.call('RPUSH', KEYS[1], ARGV[2]) end
local admitted = {}
while redis.call('SCARD', KEYS[2]) < tonumber(ARGV[1]) do
  local job = redis.call('LPOP', KEYS[1])
  if not job then break end
  redis.call('SADD', KEYS[2], job)
  table.insert(admitted, job)
end
return admitted
"""


def _check_slots(slots: int) -> int:
    if not isinstance(slots, int) or slots < 1:
        raise ValueError(f"namespace slots must be an integer >= 1, got {slots!r}")
    return slots


class RedisGate:
    def __init__(self, redis_url: str, *, slots: int, prefix: str = "ragkb:fair"):
        import redis

        if not redis_url:
            raise ValueError("RedisGate needs a redis:// URL, got an empty one")
        self.slots = _check_slots(slots)
        self._redis = redis.Redis.from_url(redis_url)
        self._script = self._redis.register_script(_ADMIT)
        self._prefix = prefix

    def _keys(self, namespace: str) -> list[str]:
        return [f"{self._prefix}:{namespace}:waiting", f"{self._prefix}:{namespace}:running"]

    def admit(self, namespace: str, job_id: str) -> list[str]:
        return self._run(namespace, add=job_id)

    def release(self, namespace: str, job_id: str) -> list[str]:
        return self._run(namespace, finished=job_id)

    def _run(self, namespace: str, *, add: str = "", finished: str = "") -> list[str]:
        admitted = self._script(keys=self._keys(namespace), args=[self.slots, add, finished])
        return [job.decode() if isinstance(job, bytes) else job for job in admitted]

    def waiting(self, namespace: str) -> int:
        return int(self._redis.llen(self._keys(namespace)[0]))

    def is_waiting(self, namespace: str, job_id: str) -> bool:
        return self._redis.lpos(self._keys(namespace)[0], job_id) is not None

    def close(self) -> None:
        self._redis.close()


class LocalGate:
    def __init__(self, *, slots: int):
        self.slots = _check_slots(slots)
        self._lock = threading.Lock()
        self._waiting: dict[str, deque[str]] = {}
        self._running: dict[str, set[str]] = {}

    def admit(self, namespace: str, job_id: str) -> list[str]:
        with self._lock:
            self._waiting.setdefault(namespace, deque()).append(job_id)
            return self._fill(namespace)

    def release(self, namespace: str, job_id: str) -> list[str]:
        with self._lock:
            self._running.get(namespace, set()).discard(job_id)
            return self._fill(namespace)

    def _fill(self, namespace: str) -> list[str]:
        waiting, running = self._waiting.setdefault(namespace, deque()), self._running.setdefault(namespace, set())
        admitted = []
        while waiting and len(running) < self.slots:
            job = waiting.popleft()
            running.add(job)
            admitted.append(job)
        if not waiting and not running:  # forget idle namespaces so memory follows the active ones
            del self._waiting[namespace], self._running[namespace]
        return admitted

    def waiting(self, namespace: str) -> int:
        with self._lock:
            return len(self._waiting.get(namespace, ()))

    def is_waiting(self, namespace: str, job_id: str) -> bool:
        with self._lock:
            return job_id in self._waiting.get(namespace, ())

    def close(self) -> None:
        pass
