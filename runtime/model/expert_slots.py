"""The routed experts of one MoE layer, held as stored: one stack per projection over the slots.

    w1, w3   Mxfp4ExpertWeights: packed uint8 [E, I, D/2] + ue8m0 [E, I, D/32]
    w2       Mxfp4ExpertWeights: packed uint8 [E, D, I/2] + ue8m0 [E, D, I/32]

E is the number of slots the module holds (every expert, or one EP rank's physical slots).
The state dict names slot j's tensors like the checkpoint names one expert's:
``{j}.w1.weight`` (packed [O, I/2], a view of the stack) and ``{j}.w1.scale``. Loading stacks
the per-expert tensors into one allocation per projection (the checkpoint's int8 bytes are
viewed as uint8); per-expert tensors without scales (the fully dequantized form) give plain
bf16 stacks [E, O, I] instead, which the ops take as well, with the same results.

The largest scale byte of each projection is tracked as the stacks are written (every write
goes through the methods below) and handed to the kernels with the stacks
(``Mxfp4ExpertWeights.scale_max``): the expert GEMMs skip a per-program scale check when it is
small (moe_experts' W_ONE_MUL). None where unknown (before anything is loaded).

Two ways to load: ``load_state_dict`` (every slot's tensors at once, stacked), or streamed
(``runtime/shard_loader.py``): :meth:`allocate` the empty stacks on the target device, then
:meth:`load_slot` copies one slot's projection at a time into them — the same bytes, and never
more than one expert's tensors besides the stacks.

Byte order (``word_order``): in word-order mode the MXFP4 stacks hold each 32-bit word's bits
permuted (``kernels/mxfp4_word_order.py``; lossless) for the Triton expert kernels' cheaper
unpack, and ``stack()`` hands out ``Mxfp4ExpertWeights(..., word_order=True)``, which those
kernels take as is and every other consumer converts back. The stacks are converted as they are
written, in place on their device, a bounded chunk at a time (never a second copy of a stack):
``load_state_dict`` after stacking, :meth:`load_slot` the slot it writes, a slot copy when the
source's order differs, :meth:`set_word_order` whatever is held. The state dict always gives
checkpoint order (a round trip is bit-exact), except with ``keep_vars=True``, which gives the
held views as they are (what the loaders use to look for unloaded tensors, without a converted
copy of every expert). Who turns the mode on: ``runtime/shard_loader.py``, from
``kernel_backends.expert_byte_order`` (the Triton expert kernels on an SM90+ GPU).

A third byte order, ``"w4a8"`` (``kernels/mxfp4_w4a8_order.py``: the layout of the W4A8 Gluon
expert kernels, ``moe_gluon_w4a8``), works the same way (``set_byte_order``; ``stack()`` hands
out ``Mxfp4ExpertWeights(..., w4a8_order=True)``), converted one slot at a time; the default on SM90
(``kernel_backends.expert_byte_order``; ``DI_EXPERT_ORDER=words`` keeps word order).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from deepinfer.kernels.mxfp4_w4a8_order import from_w4a8_order, to_w4a8_order
from deepinfer.kernels.mxfp4_word_order import from_word_order, to_word_order
from deepinfer.kernels.quantized import FP4_BLOCK, Mxfp4ExpertWeights
from deepinfer.runtime.model.params import SCALE_DTYPE, frozen

PROJECTIONS = ("w1", "w2", "w3")
BYTE_ORDERS = ("checkpoint", "words", "w4a8")
Stack = Mxfp4ExpertWeights | torch.Tensor


@dataclass(frozen=True)
class ExpertSlot:
    """One slot's projections as ``expert_ffn`` takes them: 1-expert ``Mxfp4ExpertWeights``
    (views of the stacks), or bf16 (O, I) tensors."""

    w1: Stack
    w2: Stack
    w3: Stack


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def order_of(w: Mxfp4ExpertWeights) -> str:
    """The byte order of an MXFP4 container (one of BYTE_ORDERS)."""
    return "w4a8" if w.w4a8_order else ("words" if w.word_order else "checkpoint")


def _reorder(packed: torch.Tensor, held: str, want: str) -> None:
    """Re-arrange MXFP4 bytes ``packed`` (a stack or one slot of it) in place from byte order
    ``held`` to ``want`` (through checkpoint order; the W4A8 order a slot at a time, so the
    temporaries stay one slot); nothing when they agree or the tensor has no data (meta)."""
    if held == want or packed.is_meta:
        return
    slots = packed if packed.dim() == 3 else packed[None]
    if held == "words":
        from_word_order(packed, out=packed)
    elif held == "w4a8":
        for slot in slots:
            slot.copy_(from_w4a8_order(slot).view(slot.dtype))
    if want == "words":
        to_word_order(packed, out=packed)
    elif want == "w4a8":
        for slot in slots:
            slot.copy_(to_w4a8_order(slot).view(slot.dtype))


class ExpertSlots(nn.Module):
    def __init__(self, num_slots: int, dim: int, inter: int, word_order: bool = False,
                 byte_order: str | None = None):
        super().__init__()
        self.num_slots = num_slots
        self._order = byte_order or ("words" if word_order else "checkpoint")
        if self._order not in BYTE_ORDERS:
            raise ValueError(f"ExpertSlots: byte_order {self._order!r}, expected one of "
                             f"{BYTE_ORDERS}")
        self.shapes = {"w1": (inter, dim), "w2": (dim, inter), "w3": (inter, dim)}  # (O, I)
        for w, (rows, cols) in self.shapes.items():
            self.register_parameter(f"{w}_weight", frozen(
                torch.empty(num_slots, rows, cols // 2, dtype=torch.uint8)))
            self.register_parameter(f"{w}_scale", frozen(
                torch.empty(num_slots, rows, cols // FP4_BLOCK, dtype=SCALE_DTYPE)))
        self._scale_max: dict[str, int | None] = dict.fromkeys(PROJECTIONS)

    def __len__(self) -> int:
        return self.num_slots

    @property
    def word_order(self) -> bool:
        """Whether the MXFP4 stacks hold word-order bytes (module docstring)."""
        return self._order == "words"

    @property
    def byte_order(self) -> str:
        """The MXFP4 stacks' byte order: "checkpoint", "words" or "w4a8"."""
        return self._order

    def set_word_order(self, word_order: bool) -> None:
        """``set_byte_order("words")`` or ``("checkpoint")``."""
        self.set_byte_order("words" if word_order else "checkpoint")

    def set_byte_order(self, order: str) -> None:
        """Switch the byte order of the MXFP4 stacks, re-arranging what they hold in place
        (meta or plain stacks: only the mode changes; later writes follow it)."""
        if order not in BYTE_ORDERS:
            raise ValueError(f"ExpertSlots: byte order {order!r}, expected one of {BYTE_ORDERS}")
        for w in PROJECTIONS:
            if self._parameters[f"{w}_scale"] is not None:
                _reorder(self._parameters[f"{w}_weight"].data, self._order, order)
        self._order = order

    def stack(self, w: str) -> Stack:
        """Projection ``w`` of every slot: ``Mxfp4ExpertWeights`` [E, O, I] (bytes in the
        module's order, ``byte_order``), or bf16 [E, O, I]."""
        weight, scale = self._parameters[f"{w}_weight"], self._parameters[f"{w}_scale"]
        if scale is None:
            return weight
        # built once per held tensors, scale bound and order (a forward asks 3 a layer)
        key = (id(weight), weight.data_ptr(), weight.shape, id(scale), scale.data_ptr(),
               self._scale_max[w], self._order)
        cache = self.__dict__.setdefault("_stack_cache", {})
        hit = cache.get(w)
        if hit is not None and hit[0] == key:
            return hit[1]
        made = Mxfp4ExpertWeights(weight, scale, self._scale_max[w], self._order == "words",
                                  self._order == "w4a8")
        cache[w] = (key, made)
        return made

    def _raise_scale_max(self, w: str, scale_max: int | None) -> None:
        held = self._scale_max[w]
        self._scale_max[w] = None if held is None or scale_max is None else max(held, scale_max)

    @property
    def w1(self) -> Stack:
        return self.stack("w1")

    @property
    def w2(self) -> Stack:
        return self.stack("w2")

    @property
    def w3(self) -> Stack:
        return self.stack("w3")

    def __getitem__(self, j: int) -> ExpertSlot:
        def one(w: str) -> Stack:
            s = self.stack(w)
            return s.select(j) if isinstance(s, Mxfp4ExpertWeights) else s[j]

        return ExpertSlot(one("w1"), one("w2"), one("w3"))

    def __setitem__(self, j: int, slot: ExpertSlot) -> None:
        """Copy ``slot`` (another module's ``[e]``, same form, either byte order) into slot j,
        re-arranged into this module's byte order on its device."""
        for w in PROJECTIONS:
            src, dst = getattr(slot, w), self.stack(w)
            if isinstance(dst, Mxfp4ExpertWeights) != isinstance(src, Mxfp4ExpertWeights):
                raise ValueError(f"slot {j}.{w}: cannot copy {type(src).__name__} into "
                                 f"{type(dst).__name__}")
            if isinstance(dst, Mxfp4ExpertWeights):
                _bytes(dst.packed[j]).copy_(_bytes(src.packed[0]))
                _reorder(dst.packed[j], order_of(src), self._order)
                _bytes(dst.scale[j]).copy_(_bytes(src.scale[0]))
                self._raise_scale_max(w, src.scale_max)
            else:
                dst[j].copy_(src)

    def allocate(self, device: torch.device | str, quantized: bool = True) -> None:
        """Empty stacks on ``device`` for :meth:`load_slot`: MXFP4 (uint8 packed + ue8m0 scale)
        when ``quantized``, else bf16 [E, O, I] without scales. The byte order stays the
        module's (``word_order``)."""
        self.__dict__.pop("_stack_cache", None)  # not to hold the replaced tensors
        for w, (rows, cols) in self.shapes.items():
            if quantized:
                weight = torch.empty(self.num_slots, rows, cols // 2, dtype=torch.uint8,
                                     device=device)
                scale = frozen(torch.empty(self.num_slots, rows, cols // FP4_BLOCK,
                                           dtype=SCALE_DTYPE, device=device))
            else:
                weight = torch.empty(self.num_slots, rows, cols, dtype=torch.bfloat16,
                                     device=device)
                scale = None
            self._parameters[f"{w}_weight"] = frozen(weight)
            self._parameters[f"{w}_scale"] = scale
            self._scale_max[w] = 0 if quantized else None  # nothing loaded yet

    def load_slot(self, j: int, w: str, weight: torch.Tensor,
                  scale: torch.Tensor | None = None) -> None:
        """Copy one slot's projection ``w`` (a checkpoint expert's ``weight`` [O, I/2] int8 or
        uint8 + ``scale`` [O, I/32], or a bf16 ``weight`` [O, I]) into the stacks :meth:`allocate`
        made, re-arranged into word order there in word-order mode. Raises ValueError on a
        shape or form that does not fit the stack."""
        stack = self._parameters[f"{w}_weight"]
        held_scale = self._parameters[f"{w}_scale"]
        rows, cols = self.shapes[w]
        if (scale is None) != (held_scale is None):
            raise ValueError(f"slot {j}.{w}: {'no' if scale is None else 'a'} scale given, but the"
                             f" stacks are {'MXFP4' if held_scale is not None else 'plain'}")
        want = (rows, cols // 2) if scale is not None else (rows, cols)
        if tuple(weight.shape) != want:
            raise ValueError(f"size mismatch for {j}.{w}.weight: got {tuple(weight.shape)}, the "
                             f"model has {want}")
        if scale is None:
            stack[j].copy_(weight)
            return
        weight, scale = _bytes(weight), _bytes(scale)
        Mxfp4ExpertWeights(weight[None], scale[None])  # ValueError on a wrong scale shape
        stack[j].copy_(weight)
        _reorder(stack[j], "checkpoint", self._order)  # on the stack's device, this slot only
        _bytes(held_scale[j]).copy_(scale)
        self._raise_scale_max(w, int(scale.max()))  # the checkpoint's tensor: on the host

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        """Slot j's tensors under checkpoint names, packed bytes in checkpoint order (one
        converted copy per slot in word or W4A8 order); ``keep_vars``: the held views as
        they are."""
        for j in range(self.num_slots):
            for w in PROJECTIONS:
                weight, scale = self._parameters[f"{w}_weight"], self._parameters[f"{w}_scale"]
                held = weight[j].detach()
                if (scale is not None and self._order != "checkpoint" and not keep_vars
                        and not held.is_meta):
                    held = (from_word_order(held) if self._order == "words"
                            else from_w4a8_order(held))
                destination[f"{prefix}{j}.{w}.weight"] = held
                if scale is not None:
                    destination[f"{prefix}{j}.{w}.scale"] = scale[j].detach()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        """Stack slot j's ``{j}.wN.weight`` (+ ``.scale``) tensors; MXFP4 if any scale is given,
        else plain. Any problem is reported (missing, unexpected, shape) and nothing changes."""
        names = {f"{j}.{w}.{part}" for j in range(self.num_slots) for w in PROJECTIONS
                 for part in ("weight", "scale")}
        ours = [k for k in state_dict if k.startswith(prefix)]
        unexpected_keys.extend(k for k in ours if k[len(prefix):] not in names)
        quantized = any(k.endswith(".scale") for k in ours)
        stacks, missing, problems = self._gather(state_dict, prefix, quantized)
        missing_keys.extend(missing)
        error_msgs.extend(problems)
        if missing or problems:
            return
        held = self._parameters["w1_weight"]
        self.__dict__.pop("_stack_cache", None)  # not to hold the replaced tensors
        to_held = not local_metadata.get("assign_to_params_buffers", False) and not held.is_meta
        for w in PROJECTIONS:
            for part in ("weight", "scale"):
                ts = stacks.get(f"{w}_{part}")
                if ts is None:
                    self._parameters[f"{w}_{part}"] = None
                    continue
                t = torch.stack(ts)
                if part == "scale":
                    self._scale_max[w] = int(t.max()) if t.numel() else 0
                    t = t.view(SCALE_DTYPE)
                t = t.to(held.device) if to_held else t
                if part == "weight" and quantized:  # the stack is ours (a fresh copy): in place
                    _reorder(t, "checkpoint", self._order)
                self._parameters[f"{w}_{part}"] = frozen(t)

    def _gather(self, state_dict, prefix: str, quantized: bool
                ) -> tuple[dict[str, list[torch.Tensor]], list[str], list[str]]:
        """Per ``{w}_weight`` / ``{w}_scale`` the slots' tensors (uint8 bytes when quantized),
        the missing keys, and the problems (shape or scale mismatch)."""
        parts = ("weight", "scale") if quantized else ("weight",)
        stacks: dict[str, list[torch.Tensor]] = {f"{w}_{p}": [] for w in PROJECTIONS for p in parts}
        missing: list[str] = []
        problems: list[str] = []
        for w, (rows, cols) in self.shapes.items():
            want = (rows, cols // 2) if quantized else (rows, cols)
            for j in range(self.num_slots):
                key = f"{prefix}{j}.{w}."
                got = {p: state_dict.get(key + p) for p in parts}
                missing += [key + p for p, t in got.items() if t is None]
                if any(t is None for t in got.values()):
                    continue
                if tuple(got["weight"].shape) != want:
                    problems.append(f"size mismatch for {key}weight: got "
                                    f"{tuple(got['weight'].shape)}, the model has {want}")
                    continue
                if not quantized:
                    stacks[f"{w}_weight"].append(got["weight"])
                    continue
                weight, scale = _bytes(got["weight"]), _bytes(got["scale"])
                try:
                    Mxfp4ExpertWeights(weight[None], scale[None])
                except ValueError as exc:
                    problems.append(f"{key}weight/scale: {exc}")
                    continue
                stacks[f"{w}_weight"].append(weight)
                stacks[f"{w}_scale"].append(scale)
        return stacks, missing, problems
