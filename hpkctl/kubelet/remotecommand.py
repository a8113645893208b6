"""exec and attach over WebSocket: Kubernetes' channel protocol, as the kubelet speaks it.

Subprotocols (``Sec-WebSocket-Protocol``) ``v5.channel.k8s.io``, ``v4.channel.k8s.io`` and
``channel.k8s.io`` (also what a client that names none gets). Every binary message is one channel
byte and data: 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize (JSON ``{"Width": w, "Height": h}``);
v5 adds 255 = close (data: the channel the client will not write to again, 0 = end of stdin).
Channel 3 carries the end: with v4/v5 a ``metav1.Status`` (``Success``, or ``Failure`` with reason
``NonZeroExitCode`` and the exit code as ``details.causes[{reason: ExitCode}]``), with
``channel.k8s.io`` only a failure's message as text. As the kubelet, the server first sends an
empty message on the lowest channel it will write (stdout, else stderr, else error) to say the
stream is up (``pkg/kubelet/cri/streaming/remotecommand/websocket.go``).

SPDY/3.1 (what API servers before 1.36, or without the node's ``ExtendWebSocketsToKubelet``, use
towards kubelets) is not spoken: such a request gets a Status saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from hpkctl.errors import HpkError
from hpkctl.provider import ExecSession
from hpkctl.kubelet.apistatus import ApiError

log = logging.getLogger(__name__)

V5, V4, V1 = "v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"
PROTOCOLS = (V5, V4, V1)
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255

SPDY_REFUSED = ("not supported: this kubelet speaks WebSocket (v5.channel.k8s.io) only; use kubectl >= 1.30 "
                "against an API server >= 1.36 with the node's declaredFeatures ExtendWebSocketsToKubelet")

_TRUE = {"1", "true", "True", "TRUE", "t", "T"}


@dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    command: tuple[str, ...] = ()


def _flag(query: Mapping[str, str], *names: str) -> bool:
    return any(query.get(n, "") in _TRUE for n in names)


def stream_options(query: Mapping[str, str], commands: list[str], *, need_command: bool) -> StreamOptions:
    """The streams asked for: the kubelet's ``input``/``output``/``error``/``tty`` (``1``), also
    spelled ``stdin``/``stdout``/``stderr`` (``true``) as kubectl sends them to the API server.
    As the kubelet: at least one stream; with a TTY there is no separate stderr."""
    stdin = _flag(query, "input", "stdin")
    stdout = _flag(query, "output", "stdout")
    stderr = _flag(query, "error", "stderr")
    tty = _flag(query, "tty")
    if not (stdin or stdout or stderr):
        raise ApiError(400, "you must specify at least 1 of stdin, stdout, stderr "
                       "(query input=1, output=1 or error=1)")
    if need_command and not commands:
        raise ApiError(400, "no command given: name it with command=WORD, once per word")
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr and not tty, tty=tty, command=tuple(commands))


def spdy_requested(request: web.Request) -> bool:
    return "spdy" in request.headers.get("Upgrade", "").lower()


def check_websocket(request: web.Request) -> None:
    """Refuse, before upgrading, what cannot become a channel WebSocket (SPDY first: its clients
    need to know what to use instead)."""
    if spdy_requested(request):
        raise ApiError(501, SPDY_REFUSED)
    if "websocket" not in request.headers.get("Upgrade", "").lower():
        raise ApiError(400, "exec and attach need a WebSocket upgrade (Upgrade: websocket, "
                       f"Sec-WebSocket-Protocol: {V5})")
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    if offered and not set(offered) & set(PROTOCOLS):
        raise ApiError(400, f"none of the WebSocket subprotocols {', '.join(offered)} is spoken here; "
                       f"this kubelet speaks {', '.join(PROTOCOLS)}")


def exit_status(code: int, command: tuple[str, ...]) -> dict[str, object]:
    """The ``metav1.Status`` the kubelet sends on channel 3 when the command has ended."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: command {json.dumps(list(command))} "
                       f"exited with {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


def failure_status(message: str, *, reason: str = "InternalError", code: int = 500) -> dict[str, object]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


class Channels:
    """One upgraded WebSocket speaking the channel protocol."""

    def __init__(self, ws: web.WebSocketResponse, opts: StreamOptions) -> None:
        self.ws = ws
        self.opts = opts
        self.protocol = ws.ws_protocol or ""

    async def send(self, channel: int, data: bytes) -> None:
        await self.ws.send_bytes(bytes([channel]) + data)

    async def hello(self) -> None:
        """The empty message on the lowest channel this server writes: the stream is up."""
        await self.send(STDOUT if self.opts.stdout else STDERR if self.opts.stderr else ERROR, b"")

    async def finish(self, status: dict[str, object]) -> None:
        """Channel 3 (JSON for v4/v5; for channel.k8s.io only a failure's message), then close."""
        if self.protocol in (V5, V4):
            await self.send(ERROR, json.dumps(status).encode())
        elif status.get("status") != "Success":
            await self.send(ERROR, str(status.get("message", "")).encode())
        await self.ws.close()


async def _client(ch: Channels, step: ExecSession | None) -> None:
    """Until the client closes: stdin (0), its end (v5: 255 with 0), terminal sizes (4)."""
    async for msg in ch.ws:
        if msg.type != WSMsgType.BINARY or not msg.data:
            continue
        channel, data = msg.data[0], msg.data[1:]
        if step is None:
            continue
        if channel == STDIN and ch.opts.stdin:
            await step.write_stdin(data)
        elif channel == CLOSE and data[:1] == bytes([STDIN]) and ch.protocol == V5:
            step.close_stdin()
        elif channel == RESIZE and ch.opts.tty:
            try:
                size = {k.lower(): int(v) for k, v in json.loads(data).items()}
                step.resize(size.get("width", 0), size.get("height", 0))
            except (ValueError, TypeError, AttributeError, OSError):
                log.debug("ignoring a malformed resize message %r", data)


async def _pump(read: Callable[[], Awaitable[bytes]], send: Callable[[bytes], Awaitable[None]] | None) -> None:
    while data := await read():
        if send is not None:
            await send(data)


async def run_exec(ch: Channels, start: Callable[[], Awaitable[ExecSession]]) -> None:
    """Start the step, stream it until it ends (or the client goes), send its exit status."""
    try:
        step = await start()
    except HpkError as e:
        await ch.finish(failure_status(f"{e.message}" + (f" ({e.hint})" if e.hint else "")))
        return
    try:
        await ch.hello()
        out = asyncio.create_task(_pump(step.read_stdout, (lambda d: ch.send(STDOUT, d)) if ch.opts.stdout else None))
        err = asyncio.create_task(_pump(step.read_stderr, (lambda d: ch.send(STDERR, d)) if ch.opts.stderr else None))
        client = asyncio.create_task(_client(ch, step))
        streams: asyncio.Future[Any] = asyncio.gather(out, err)
        await asyncio.wait({streams, client}, return_when=asyncio.FIRST_COMPLETED)
        if not streams.done():  # the client went away: cancel the step (Slurm kills the task)
            step.terminate()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(streams, timeout=30)
        code = await step.wait()
        with contextlib.suppress(Exception):
            await streams  # an error in a pump (e.g. the client vanished while we sent) ends here
        failure = step.start_failure(code)
        step.close()  # before the client hears the end: nothing of the step outlives the exec
        if not ch.ws.closed:
            status = failure_status(f"srun could not start the command: {failure}") if failure else \
                exit_status(code, ch.opts.command)
            await ch.finish(status)
        client.cancel()
    finally:
        step.terminate()
        step.close()


async def run_attach(ch: Channels, follow: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]) -> None:
    """Stream the container's output from now until it ends (or the client goes)."""
    await ch.hello()
    channel = STDOUT if ch.opts.stdout else STDERR
    follower = asyncio.ensure_future(follow(lambda d: ch.send(channel, d)))
    client = asyncio.create_task(_client(ch, None))
    await asyncio.wait({follower, client}, return_when=asyncio.FIRST_COMPLETED)
    follower.cancel()
    client.cancel()
    with contextlib.suppress(asyncio.CancelledError, ConnectionError):
        await follower
    if not ch.ws.closed:
        await ch.finish({"metadata": {}, "status": "Success"})
