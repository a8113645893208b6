"""Request bodies in ``application/vnd.kubernetes.protobuf``, decoded to JSON objects.

client-go's typed clients (``kubectl create namespace|secret|configmap|deployment|token``,
helm's release storage) send built-in objects as protobuf, and a real kube-apiserver accepts
them; there is no fallback to JSON on a 415. The field numbers are not on these machines as
``.proto`` files, but every Go client carries them: the struct tags of k8s.io/api
(``protobuf:"bytes,10,opt,name=nodeName"``) are kept in the binary's type data for reflection.
So the stand-in reads them from the real kubectl that ci/kube-tools installed: ELF sections,
the Go module data (types base, typelinks), the struct types with their fields and tags. What
it cannot decode (no kubectl, an unknown kind) stays a 415.
"""

from __future__ import annotations

import base64
import json
import mmap
import struct
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

MAGIC = b"k8s\x00"
K_PTR, K_SLICE, K_MAP, K_STRUCT, K_STRING, K_BOOL, K_UINT8 = 22, 23, 21, 25, 24, 1, 8
INTS = {2, 3, 4, 5, 6, 7, 9, 10, 11, 12}
META = "k8s.io/apimachinery/pkg/apis/meta/v1"
SPECIAL = {f"{META}.Time": "time", f"{META}.MicroTime": "microtime", f"{META}.Duration": "duration",
           "k8s.io/apimachinery/pkg/api/resource.Quantity": "quantity",
           "k8s.io/apimachinery/pkg/util/intstr.IntOrString": "intorstring",
           "k8s.io/apimachinery/pkg/runtime.RawExtension": "raw", f"{META}.FieldsV1": "raw"}
GROUP_PKG = {"": "core", "apps": "apps", "batch": "batch", "coordination.k8s.io": "coordination",
             "events.k8s.io": "events", "policy": "policy", "discovery.k8s.io": "discovery",
             "rbac.authorization.k8s.io": "rbac", "scheduling.k8s.io": "scheduling",
             "authentication.k8s.io": "authentication", "autoscaling": "autoscaling"}
META_KINDS = {"DeleteOptions", "CreateOptions", "UpdateOptions", "PatchOptions", "Status"}


class Unsupported(Exception):
    """The body cannot be decoded here (answered as 415)."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


class GoTypes:
    """Struct types and their protobuf tags, read from a Go binary's reflection data."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            self.data: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        shoff, = struct.unpack_from("<Q", self.data, 0x28)
        entsize, num, strndx = struct.unpack_from("<HHH", self.data, 0x3A)
        raw = [struct.unpack_from("<IIQQQQ", self.data, shoff + i * entsize) for i in range(num)]
        names = raw[strndx][4]
        self.sections: dict[str, tuple[int, int, int]] = {}
        for name, _, _, addr, off, size in raw:
            end = self.data.find(b"\0", names + name)
            self.sections[self.data[names + name:end].decode()] = (addr, off, size)
        addr, off, size = self.sections[".go.module"]
        words = struct.unpack_from(f"<{size // 8}Q", self.data, off)
        typelink = self.sections[".typelink"]
        i = next((i for i, w in enumerate(words) if w == typelink[0] and words[i + 1] == typelink[2] // 4), None)
        if i is None or i < 8:
            raise Unsupported(f"{path}: no Go module data with typelinks")
        self.types = words[i - 8]  # moduledata (Go 1.25): types, etypes, rodata, gofunc, textsectmap, ..., typelinks
        rodata = self.sections.get(".rodata", (0, 0, 0))
        if not rodata[0] <= self.types < rodata[0] + rodata[2]:
            raise Unsupported(f"{path}: unexpected Go module data layout")
        self.typelinks = struct.unpack_from(f"<{typelink[2] // 4}i", self.data, typelink[1])
        self._index: dict[str, int] | None = None

    def off(self, vaddr: int) -> int:
        for addr, off, size in self.sections.values():
            if addr <= vaddr < addr + size and off:
                return vaddr - addr + off
        raise Unsupported(f"address {vaddr:#x} outside the binary")

    def u64(self, vaddr: int) -> int:
        return int(struct.unpack_from("<Q", self.data, self.off(vaddr))[0])

    def name(self, vaddr: int) -> tuple[str, str]:
        """(name, tag) of an abi.Name blob."""
        o = self.off(vaddr)
        flags = self.data[o]
        n, i = _varint(self.data, o + 1)
        text = bytes(self.data[i:i + n]).decode()
        tag = ""
        if flags & 2:
            t, j = _varint(self.data, i + n)
            tag = bytes(self.data[j:j + t]).decode()
        return text, tag

    def kind(self, t: int) -> int:
        return int(self.data[self.off(t) + 23]) & 0x1F

    def type_name(self, t: int) -> str:
        """``pkgpath.Name`` of a named type, else ''."""
        o = self.off(t)
        tflag = self.data[o + 20]
        if not tflag & 4:
            return ""
        str_off, = struct.unpack_from("<i", self.data, o + 40)
        text, _ = self.name(self.types + str_off)
        if tflag & 2:
            text = text[1:]
        if not tflag & 1:
            return text
        k = self.kind(t)
        extra = {K_STRUCT: 80, K_PTR: 56, K_SLICE: 56, K_MAP: 88}.get(k, 48)
        pkg_off, = struct.unpack_from("<i", self.data, o + extra)
        pkg = self.name(self.types + pkg_off)[0] if pkg_off else ""
        return f"{pkg}.{text.split('.', 1)[-1]}" if pkg else text

    def elem(self, t: int, at: int = 48) -> int:
        return self.u64(t + at)

    def fields(self, t: int) -> list[tuple[str, str, int]]:
        ptr, n = self.u64(t + 56), self.u64(t + 64)
        return [(*self.name(self.u64(ptr + 24 * i)), self.u64(ptr + 24 * i + 8)) for i in range(n)]

    def find(self, full: str) -> int:
        if self._index is None:
            self._index = {}
            for rel in self.typelinks:
                t = self.types + rel
                if self.kind(t) == K_PTR:
                    e = self.elem(t)
                    if self.kind(e) == K_STRUCT:
                        self._index.setdefault(self.type_name(e), e)
        if full not in self._index:
            raise Unsupported(f"no type {full} in the client binary")
        return self._index[full]


class Decoder:
    def __init__(self, go: GoTypes) -> None:
        self.go = go
        self._msgs: dict[int, dict[int, tuple[str, bool, bool, int]]] = {}

    def message(self, t: int) -> dict[int, tuple[str, bool, bool, int]]:
        """field number -> (json name ('' = inline), omitempty, pointer, Go type)"""
        if t not in self._msgs:
            out: dict[int, tuple[str, bool, bool, int]] = {}
            for _, tag, ft in self.go.fields(t):
                parts = dict(p.split(":", 1) for p in tag.replace('" ', '"\n').splitlines() if ":" in p)
                pb, js = parts.get("protobuf", "").strip('"'), parts.get("json", "").strip('"')
                if not pb:
                    continue
                num = int(pb.split(",")[1])
                out[num] = (js.split(",")[0], "omitempty" in js, self.go.kind(ft) == K_PTR, ft)
            self._msgs[t] = out
        return self._msgs[t]

    def decode(self, body: bytes) -> dict[str, Any]:
        if not body.startswith(MAGIC):
            raise Unsupported("protobuf body without the k8s envelope")
        env = self._raw_fields(body[4:])
        type_meta = self._raw_fields(env.get(1, [b""])[0])
        api_version = type_meta.get(1, [b""])[0].decode()
        kind = type_meta.get(2, [b""])[0].decode()
        group, _, version = api_version.rpartition("/")
        pkg = META if kind in META_KINDS else f"k8s.io/api/{GROUP_PKG.get(group, group.split('.')[0])}/{version}"
        obj = self._struct(self.go.find(f"{pkg}.{kind}"), env.get(2, [b""])[0])
        if kind not in META_KINDS or api_version:
            obj = {"apiVersion": api_version, "kind": kind, **obj}
        return obj

    @staticmethod
    def _raw_fields(buf: bytes) -> dict[int, list[Any]]:
        out: dict[int, list[Any]] = {}
        i = 0
        while i < len(buf):
            key, i = _varint(buf, i)
            wire, num = key & 7, key >> 3
            v: Any
            if wire == 0:
                v, i = _varint(buf, i)
            elif wire == 2:
                n, i = _varint(buf, i)
                v, i = bytes(buf[i:i + n]), i + n
            elif wire == 1:
                v, i = struct.unpack_from("<q", buf, i)[0], i + 8
            elif wire == 5:
                v, i = struct.unpack_from("<i", buf, i)[0], i + 4
            else:
                raise Unsupported(f"protobuf wire type {wire}")
            out.setdefault(num, []).append(v)
        return out

    def _struct(self, t: int, buf: bytes) -> dict[str, Any]:
        special = SPECIAL.get(self.go.type_name(t))
        if special:
            return {"": self._special(special, self._raw_fields(buf))}
        spec = self.message(t)
        out: dict[str, Any] = {}
        for num, values in self._raw_fields(buf).items():
            if num not in spec:
                continue
            name, omitempty, pointer, ft = spec[num]
            value = self._value(ft, values)
            # Go's encoding/json omits empty scalars, slices and maps, never a struct
            if value is None or (omitempty and not pointer and value in ("", 0, False, [], {})
                                 and self.go.kind(ft) != K_STRUCT):
                continue
            if not name and isinstance(value, dict):
                out.update(value)
            else:
                out[name] = value
        return out

    def _value(self, t: int, values: list[Any]) -> Any:
        k = self.go.kind(t)
        if k == K_PTR:
            return self._value(self.go.elem(t), values)
        if k == K_SLICE:
            e = self.go.elem(t)
            if self.go.kind(e) == K_UINT8:
                return base64.b64encode(values[-1]).decode()
            return [self._value(e, [v]) for v in values]
        if k == K_MAP:
            key_t, val_t = self.go.elem(t, 48), self.go.elem(t, 56)
            out = {}
            for entry in values:
                f = self._raw_fields(entry)
                out[self._value(key_t, f.get(1, [b""]))] = self._value(val_t, f.get(2, [b""]))
            return out
        if k == K_STRUCT:
            s = self._struct(t, values[-1])
            return s[""] if set(s) == {""} else s
        v = values[-1]
        if k == K_STRING:
            return v.decode() if isinstance(v, bytes) else str(v)
        if k == K_BOOL:
            return bool(v)
        if k in INTS:
            return v - (1 << 64) if v >= 1 << 63 else v
        raise Unsupported(f"Go kind {k} in a protobuf body")

    @staticmethod
    def _special(kind: str, f: dict[int, list[Any]]) -> Any:
        if kind in ("time", "microtime"):
            secs, nanos = f.get(1, [0])[-1], f.get(2, [0])[-1]
            if not secs and not nanos:
                return None
            dt = datetime.fromtimestamp(secs + nanos / 1e9, timezone.utc)
            return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if kind == "microtime" else "%Y-%m-%dT%H:%M:%SZ")
        if kind == "quantity":
            return f.get(1, [b""])[-1].decode()
        if kind == "intorstring":
            return f.get(2, [0])[-1] if f.get(1, [0])[-1] == 0 else f.get(3, [b""])[-1].decode()
        if kind == "raw":
            raw = f.get(1, [b""])[-1]
            return json.loads(raw) if raw else None
        ns = f.get(1, [0])[-1]
        return f"{ns / 1e9:g}s"


@lru_cache(maxsize=1)
def decoder(binary: str) -> Decoder | Unsupported:
    path = Path(binary)
    if not path.is_file():
        return Unsupported(f"no Go client binary at {binary} to read the protobuf field numbers from")
    try:
        return Decoder(GoTypes(path))
    except (Unsupported, OSError, struct.error, KeyError, ValueError) as e:
        return e if isinstance(e, Unsupported) else Unsupported(f"{binary}: {e}")


def decode(body: bytes, binary: str) -> dict[str, Any]:
    dec = decoder(binary)
    if isinstance(dec, Unsupported):
        raise dec
    try:
        return dec.decode(body)
    except (IndexError, struct.error, UnicodeDecodeError, ValueError) as e:
        raise Unsupported(f"malformed protobuf body: {e}") from None
