"""The kubelet's HTTPS API (port 10250): what the API server proxies ``kubectl logs``, ``exec`` and
``attach`` to, plus ``/pods``, ``/runningpods/``, ``/stats/summary`` and ``/healthz``
(``kubelet-api.md`` §1.7).

Who gets in: TLS with a client certificate signed by the cluster CA (``ssl.CERT_REQUIRED``), as
the API server presents its kubelet-client certificate; without one the handshake fails. Then each
request is authorised on the certificate's identity (:mod:`hpkctl.kubelet.authz`): the API
server's kubelet-client identity and ``system:masters`` at once, anyone else only as the API server's
SubjectAccessReview allows (the same CA signs the scheduler's and every approved CSR's certificates). The server listens on the node's configured
address only.

The server runs its own asyncio loop in a daemon thread, so the daemon's threads are never blocked
by a log that is followed for hours. It only *reads* the ``PodTable`` (the reconcile workers own
it); logs, container states and exec come from the pod provider (``log_file``, ``container_run``,
``log_complete``, ``exec``: for the job-per-pod provider the pod directory and an ``srun`` step), each
call that reads files made on a worker thread (``asyncio.to_thread``) so that a slow file system never
stalls the loop that serves every other stream.
Routes and their refusals:

* ``/containerLogs/{ns}/{pod}/{container}``: :mod:`hpkctl.kubelet.logs` (what ``timestamps`` and
  ``sinceSeconds`` can mean without per-line times is said there).
* ``/exec/{ns}/{pod}/{container}``: a new step of the pod's job runs ``job.sh exec`` (the command
  in the container's image, env and mounts; :mod:`hpkctl.jobs.step`), streamed as in
  :mod:`hpkctl.kubelet.remotecommand`.
* ``/attach/{ns}/{pod}/{container}``: a container under Apptainer has no stdin or terminal (the job
  starts it with ``</dev/null``), so attach streams its output from now until it ends (as ``logs
  -f`` without the past), and refuses stdin and TTY with a message saying what to use instead.
* errors are Kubernetes ``Status`` JSON: 404 for an unknown pod or container, 400 for a request
  that cannot be served (not running, no previous run), 422 for invalid log options, 501 for SPDY.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from hpkctl.errors import HpkError
from hpkctl.kubelet import logs, remotecommand
from hpkctl.kubelet.apistatus import ApiError, status
from hpkctl.kubelet.authz import DENIED_TTL, Review, authoriser
from hpkctl.kubelet.certs import cannot_listen
from hpkctl.kubelet.remotecommand import Channels
from hpkctl.kubelet.stats import CGROUP_ROOT, CpuRates, job_usage, pod_usage
from hpkctl.kubelet.table import PodTable, Tracked
from hpkctl.pod.status import restart_policies
from hpkctl.provider import ExecSession, PodProvider

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0
API_CLIENT = "kube-apiserver-kubelet-client"  # kubeadm's and hpkctl's CN of the API server's kubelet client
STOP_TIMEOUT = 10.0


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(body: dict[str, Any], code: int = 200) -> web.Response:
    return web.json_response(body, status=code)


@web.middleware
async def _statuses(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
    """Every refusal as a Kubernetes Status (aiohttp's own 404/405 included)."""
    try:
        return await handler(request)
    except ApiError as e:
        return _json(e.body(), e.code)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        message = f"{request.method} {request.path}: {e.reason}"
        if e.status == 404:
            message += (" (this kubelet serves /healthz, /pods, /runningpods/, /stats/summary, "
                        "/containerLogs/NS/POD/CONTAINER, /exec/NS/POD/CONTAINER, /attach/NS/POD/CONTAINER)")
        return _json(status(e.status, message), e.status)


class _AccessLog(AbstractAccessLogger):
    """One line per request without its query string: exec's ``command=`` words (and any other
    argument a client sends) stay out of the log (issue 20.18)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info("%s %s %s %d %.3fs", request.remote, request.method, request.path, response.status, time)


class KubeletServer:
    """The HTTPS API over ``table``. :meth:`start` returns once it listens (``port=0``: a free
    port, then in ``.port``); :meth:`stop` closes it, ends follows and cancels running execs.

    ``clients``: the certificate common names served besides ``system:masters`` (the API server's
    kubelet-client identity); ``review``: asks the API server about anyone else (SubjectAccessReview), whose
    denials are kept ``denied_ttl`` seconds; ``tls``: the serving certificate and the client CA
    (``hpkctl.kubelet.certs.serving_tls``, loaded by the caller: the kubelet does it before it takes a
    pod, so unreadable TLS files stop it before any submission); ``sock``: a listening socket made
    beforehand (else one on ``host:port`` at start). ``cgroup_root`` and ``follow_poll`` exist for tests."""

    def __init__(self, table: PodTable, *, provider: PodProvider, node_name: str, host: str, port: int,
                 tls: ssl.SSLContext, clients: Collection[str] = (API_CLIENT,),
                 review: Review | None = None, denied_ttl: float = DENIED_TTL, cgroup_root: Path = CGROUP_ROOT,
                 follow_poll: float = logs.FOLLOW_POLL, sock: socket.socket | None = None) -> None:
        self.table = table
        self.provider = provider
        self.node_name = node_name
        self.host = host
        self.port = port
        self.clients = tuple(clients)
        self.review = review
        self.denied_ttl = denied_ttl
        self.cgroup_root = cgroup_root
        self.follow_poll = follow_poll
        self.sock, self.tls = sock, tls
        self.started_at = _now()
        self._rates = CpuRates()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._streams: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        ctx = self.tls
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="kubelet-api", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._listen(ctx), loop).result(START_TIMEOUT)
        except (OSError, FutureTimeout) as e:
            self.stop()
            raise cannot_listen(self.host, self.port, e) from e
        log.info("kubelet API listening on https://%s:%d", self.host, self.port)

    async def _listen(self, ctx: ssl.SSLContext) -> None:
        app = web.Application(middlewares=[_statuses, authoriser(self.clients, review=self.review,
                                                                  denied_ttl=self.denied_ttl)])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/pods", self._pods)
        app.router.add_get("/runningpods/", self._running_pods)
        app.router.add_get("/stats/summary", self._stats)
        app.router.add_get("/containerLogs/{ns}/{pod}/{container}", self._logs)
        for method in ("GET", "POST"):
            app.router.add_route(method, "/exec/{ns}/{pod}/{container}", self._exec)
            app.router.add_route(method, "/attach/{ns}/{pod}/{container}", self._attach)
        self._runner = web.AppRunner(app, shutdown_timeout=2.0, access_log=log, access_log_class=_AccessLog)
        await self._runner.setup()
        site: web.BaseSite = (web.SockSite(self._runner, self.sock, ssl_context=ctx) if self.sock is not None
                              else web.TCPSite(self._runner, self.host, self.port, ssl_context=ctx))
        await site.start()
        server = site._server  # aiohttp keeps the asyncio server private; the bound port is only there
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._close(), loop).result(STOP_TIMEOUT)
            except (FutureTimeout, RuntimeError) as e:
                log.warning("kubelet API did not close cleanly: %s", e)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(STOP_TIMEOUT)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    async def _close(self) -> None:
        for task in list(self._streams):
            task.cancel()
        if self._streams:
            await asyncio.wait(self._streams, timeout=STOP_TIMEOUT / 2)
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ lookups

    def _pod(self, request: web.Request) -> Tracked:
        ns, name = request.match_info["ns"], request.match_info["pod"]
        tracked = self.table.by_name(ns, name)
        if tracked is None:
            raise ApiError(404, f'pod "{name}" does not exist in namespace "{ns}" on node {self.node_name}')
        return tracked

    def _container(self, request: web.Request) -> tuple[Tracked, str]:
        tracked = self._pod(request)
        container = request.match_info["container"]
        if container not in tracked.containers:
            raise ApiError(404, f'container "{container}" not found in pod "{tracked.name}" '
                           f'(it has: {", ".join(tracked.containers)})')
        return tracked, container

    @staticmethod
    def _waiting_reason(tracked: Tracked, container: str) -> str:
        for c in tracked.status.containers if tracked.status else []:
            if c.name == container and c.state == "waiting":
                return c.reason or "ContainerCreating"
        return "ContainerCreating"

    def _running(self, tracked: Tracked, container: str) -> None:
        """Nothing if ``container`` runs now (the provider says so), else 400."""
        run = self.provider.container_run(tracked.uid, container)
        if run.running and tracked.job_id:
            return
        if run.exit_code is not None:
            state = f"has terminated (exit code {run.exit_code})"
        else:
            state = f"is waiting to start: {self._waiting_reason(tracked, container)}"
        raise ApiError(400, f'container "{container}" in pod "{tracked.name}" is not running: it {state}')

    def _done(self, tracked: Tracked, container: str) -> Callable[[], bool]:
        """When a followed log is complete: the container will not run again, or the pod is gone."""
        policy = restart_policies(tracked.pod).get(container, "Never")

        def done() -> bool:
            current = self.table.get(tracked.uid)
            if current is None or (current.status is not None and current.status.finished):
                return True
            return self.provider.log_complete(tracked.uid, container, policy=policy)

        return done

    def _tracked(self, task: asyncio.Task[Any]) -> None:
        self._streams.add(task)
        task.add_done_callback(self._streams.discard)

    # ------------------------------------------------------------------ routes

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _pods(self, request: web.Request) -> web.Response:
        return _json({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                      "items": [t.pod for t in self.table.snapshot()]})

    async def _running_pods(self, request: web.Request) -> web.Response:
        """Pods with a container running now, in the runtime's terms: name, namespace, uid, containers."""
        items = []
        for t in self.table.snapshot():
            running = [c.name for c in (t.status.containers if t.status else []) if c.state == "running"]
            if not running:
                continue
            spec = t.pod.get("spec") or {}
            images = {c.get("name"): c.get("image", "")
                      for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}
            items.append({"metadata": {"name": t.name, "namespace": t.namespace, "uid": t.uid},
                          "spec": {"containers": [{"name": n, "image": images.get(n, "")} for n in running]},
                          "status": {}})
        return _json({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def _stats(self, request: web.Request) -> web.Response:
        stamp, now = _now(), time.time()
        pods = []
        tracked = self.table.snapshot()
        for t in tracked:
            st = t.status
            entry: dict[str, Any] = {"podRef": {"name": t.name, "namespace": t.namespace, "uid": t.uid},
                                     "startTime": (st.started_at if st else None) or stamp,
                                     "containers": [{"name": c.name, "startTime": c.started_at}
                                                    for c in (st.containers if st else []) if c.started_at]}
            if t.job_id and st is not None and not st.finished:
                usage = await asyncio.to_thread(job_usage, t.job_id, root=self.cgroup_root)
                rate = self._rates.rate(t.uid, now=now, cpu_ns=usage.cpu_ns) if usage.cpu_ns is not None else None
                entry |= pod_usage(usage, stamp=stamp, nano_cores=rate)
            pods.append(entry)
        self._rates.forget_except({t.uid for t in tracked})
        return _json({"node": {"nodeName": self.node_name, "startTime": self.started_at}, "pods": pods})

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        tracked, container = self._container(request)
        opts = logs.parse_log_options(request.query)
        # file I/O off the event loop, as every read here
        path = await asyncio.to_thread(self.provider.log_file, tracked.uid, container, previous=opts.previous)
        if path is None:
            if opts.previous:
                raise ApiError(400, f'previous terminated container "{container}" in pod "{tracked.name}" not found')
            raise ApiError(400, f'container "{container}" in pod "{tracked.name}" is waiting to start: '
                           f"{self._waiting_reason(tracked, container)}")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        task = asyncio.current_task()
        if task is not None:
            self._tracked(task)
        try:
            await logs.stream_log(path, opts, resp.write, done=self._done(tracked, container),
                                  poll=self.follow_poll)
        except FileNotFoundError:
            pass  # moved aside between the check and the open: nothing to send
        except (ConnectionError, asyncio.CancelledError):
            return resp  # the client went away, or the server stops
        await resp.write_eof()
        return resp

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        remotecommand.check_websocket(request)
        tracked, container = self._container(request)
        opts = remotecommand.stream_options(request.query, request.query.getall("command", []), need_command=True)
        await asyncio.to_thread(self._running, tracked, container)

        async def start() -> ExecSession:
            return await self.provider.exec(tracked.uid, container, opts.command, tty=opts.tty, stdin=opts.stdin)

        ws = await self._upgrade(request)
        # the command's words are the client's business (they may hold a token); never logged (issue 20.18)
        log.info("exec in %s/%s: %d word(s) (job %s)", tracked.key, container, len(opts.command), tracked.job_id)
        await self._serve(remotecommand.run_exec(Channels(ws, opts), start))
        return ws

    async def _attach(self, request: web.Request) -> web.StreamResponse:
        remotecommand.check_websocket(request)
        tracked, container = self._container(request)
        opts = remotecommand.stream_options(request.query, [], need_command=False)
        if opts.stdin or opts.tty:
            raise ApiError(400, f'cannot attach to the stdin of container "{container}" in pod "{tracked.name}": '
                           "under Apptainer a container has no stdin or terminal (the job starts it with "
                           "/dev/null as input); attach without -i/-t to stream its output, or use "
                           "kubectl exec -it POD -- sh for an interactive shell in it")
        await asyncio.to_thread(self._running, tracked, container)
        done = self._done(tracked, container)
        path = await asyncio.to_thread(self.provider.log_file, tracked.uid, container)
        if path is None:
            raise ApiError(400, f'container "{container}" in pod "{tracked.name}" has no output yet')
        follow_opts = logs.LogOptions(follow=True, tail_lines=0)

        async def follow(send: Callable[[bytes], Awaitable[None]]) -> None:
            await logs.stream_log(path, follow_opts, send, done=done, poll=self.follow_poll)

        ws = await self._upgrade(request)
        await self._serve(remotecommand.run_attach(Channels(ws, opts), follow))
        return ws

    async def _upgrade(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=remotecommand.PROTOCOLS, heartbeat=30.0, max_msg_size=0)
        await ws.prepare(request)
        return ws

    async def _serve(self, work: Awaitable[None]) -> None:
        """Run one stream as its own task, so that :meth:`stop` can cancel it."""
        task = asyncio.ensure_future(work)
        self._tracked(task)
        try:
            await task
        except asyncio.CancelledError:
            pass
        except ConnectionError as e:
            log.debug("stream ended by the client: %s", e)
