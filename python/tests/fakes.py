"""Small stand-ins for what SGLang hands a HiCache storage backend: its storage config and its
host KV pool, with the buffer shapes, pointer arithmetic and flat-page copies SGLang uses, for
MHA and MLA, the memory layouts SGLang stores, and numpy- or torch-backed buffers.

The buffer shapes mirror hzh0425/sglang@03855bda08537598d9310b2a44b640d19861969d
python/sglang/srt/mem_cache/memory_pool_host.py (MHA: layer_first (2, L, T, H, D),
page_first (2, T, L, H, D), page_first_direct (2, P, L, ps, H, D), page_head (2, P, H, ps, L, D));
the newer pools of sglang_fakes.py cite their own sources."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

try:
    import torch
except ImportError:  # torch is optional for the numpy-backed fakes
    torch = None

LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")


@dataclass
class StorageConfig:
    """The current HiCacheStorageConfig shape."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: Optional[str] = "test-model"
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class OldStorageConfig:
    """The shape older servers pass."""

    tp_rank: int
    tp_size: int
    is_mla_model: bool
    is_page_first_layout: bool
    model_name: Optional[str]
    extra_config: Optional[dict] = None


def _itemsize(buf):
    return buf.element_size() if hasattr(buf, "element_size") else buf.itemsize


def _ptr(buf):
    return buf.data_ptr() if hasattr(buf, "data_ptr") else buf.ctypes.data


class HostPool:
    """A host KV pool: `tokens` token slots, pages of `page_size` tokens.

    MHA buffers: layer_first (2, L, T, H, D), page_first (2, T, L, H, D),
    page_first_direct (2, T/ps, L, ps, H, D). MLA buffers: (L, T, 1, C), (T, L, 1, C),
    (T/ps, L, ps, 1, C).
    """

    def __init__(self, layout="page_first", mla=False, backing="numpy", dtype=None,
                 tokens=64, page_size=4, layers=3, heads=2, head_dim=8, kv_lora_rank=12,
                 qk_rope_head_dim=4):
        assert tokens % page_size == 0
        self.layout = layout
        self.mla = mla
        self.page_size = page_size
        self.size = tokens
        self.layer_num = layers
        self.head_num = heads if not mla else 1
        self.head_dim = head_dim if not mla else kv_lora_rank + qk_rope_head_dim
        if mla:
            self.kv_lora_rank = kv_lora_rank
            self.qk_rope_head_dim = qk_rope_head_dim
        L, T, H, D, ps = layers, tokens, self.head_num, self.head_dim, page_size
        if mla:
            # page_first_kv_split (Ascend): the latent part and the rope part apart.
            shape = {"layer_first": (L, T, 1, D), "page_first": (T, L, 1, D),
                     "page_first_direct": (T // ps, L, ps, 1, D),
                     "page_first_kv_split": (T, L, 1, D)}[layout]
        else:
            shape = {"layer_first": (2, L, T, H, D), "page_first": (2, T, L, H, D),
                     "page_first_direct": (2, T // ps, L, ps, H, D),
                     "page_head": (2, T // ps, H, ps, L, D)}[layout]
        if backing == "torch":
            self.dtype = dtype if dtype is not None else torch.bfloat16
            self.kv_buffer = torch.zeros(shape, dtype=self.dtype)
        else:
            self.dtype = np.dtype(dtype if dtype is not None else np.float16)
            self.kv_buffer = np.zeros(shape, dtype=self.dtype)
        self.backing = backing

    # -- what SGLang's HostKVCache offers ------------------------------------------------

    def get_page_buffer_meta(self, indices):
        idx = indices.tolist()
        assert len(idx) % self.page_size == 0
        item = _itemsize(self.kv_buffer)
        base = _ptr(self.kv_buffer)
        L, T, H, D, ps = self.layer_num, self.size, self.head_num, self.head_dim, self.page_size
        ptrs, sizes = [], []
        for start in idx[::ps]:
            if self.layout == "layer_first":
                for layer in range(L):
                    if self.mla:
                        ptrs.append(base + (layer * T + start) * D * item)
                        sizes.append(ps * D * item)
                    else:
                        k = base + (layer * T + start) * H * D * item
                        ptrs += [k, k + L * T * H * D * item]
                        sizes += [ps * H * D * item] * 2
            elif self.layout == "page_head":
                # heads outermost within a page: K then V, each one run
                k = base + (start // ps) * H * ps * L * D * item
                ptrs += [k, k + T * L * H * D * item]
                sizes += [H * ps * L * D * item] * 2
            elif self.layout == "page_first_kv_split":
                lora = self.kv_lora_rank
                row = base + start * L * D * item
                ptrs += [row, row + lora * item]
                sizes += [ps * L * lora * item, ps * L * (D - lora) * item]
            elif self.layout == "page_first":
                if self.mla:
                    ptrs.append(base + start * L * D * item)
                    sizes.append(ps * L * D * item)
                else:
                    k = base + start * L * H * D * item
                    ptrs += [k, k + T * L * H * D * item]
                    sizes += [ps * L * H * D * item] * 2
            else:  # page_first_direct
                page = start // ps
                if self.mla:
                    ptrs.append(base + page * L * ps * D * item)
                    sizes.append(L * ps * D * item)
                else:
                    k = base + page * L * ps * H * D * item
                    ptrs += [k, k + T * L * H * D * item]
                    sizes += [L * ps * H * D * item] * 2
        return ptrs, sizes

    def _page_view(self, index):
        ps = self.page_size
        if self.layout == "layer_first":
            return self.kv_buffer[:, index:index + ps] if self.mla else \
                self.kv_buffer[:, :, index:index + ps]
        if self.layout in ("page_first", "page_first_kv_split"):
            return self.kv_buffer[index:index + ps] if self.mla else \
                self.kv_buffer[:, index:index + ps]
        if self.layout == "page_head":
            return self.kv_buffer[:, index // ps]
        return self.kv_buffer[index // ps] if self.mla else self.kv_buffer[:, index // ps]

    def get_data_page(self, index, flat=True):
        view = self._page_view(index)
        return view.flatten() if flat else view

    def get_dummy_flat_data_page(self):
        view = self._page_view(0)
        if self.backing == "torch":
            return torch.zeros(view.numel(), dtype=self.dtype)
        return np.zeros(view.size, dtype=self.dtype)

    def set_from_flat_data_page(self, index, data_page):
        view = self._page_view(index)
        view[...] = data_page.reshape(view.shape)

    # -- test helpers ---------------------------------------------------------------------

    def head_bytes(self, index, first_head, heads):
        """The bytes of `heads` heads from `first_head` of a page_head page (K then V)."""
        assert self.layout == "page_head"
        view = self.kv_buffer[:, index // self.page_size, first_head:first_head + heads]
        if self.backing == "torch":
            return view.contiguous().view(torch.uint8).numpy().copy().reshape(-1)
        return np.ascontiguousarray(view).view(np.uint8).reshape(-1).copy()

    def page_bytes(self, index):
        """The page's bytes, as numpy uint8 (bfloat16 compared bit for bit)."""
        page = self.get_data_page(index, flat=True)
        if self.backing == "torch":
            return page.contiguous().view(torch.uint8).numpy().copy()
        return np.ascontiguousarray(page).view(np.uint8).copy()

    def fill_random(self, seed):
        """Random bit patterns in every slot (NaNs included for float types)."""
        rng = np.random.default_rng(seed)
        raw = rng.integers(0, 256, size=_itemsize(self.kv_buffer) * self._numel(),
                           dtype=np.uint8)
        is_bool = self.dtype == (torch.bool if self.backing == "torch" else np.bool_)
        if is_bool:
            raw = raw & 1  # bool memory holds 0 or 1
        if self.backing == "torch":
            self.kv_buffer.view(-1).view(torch.uint8).copy_(torch.from_numpy(raw))
        else:
            self.kv_buffer.reshape(-1).view(np.uint8)[:] = raw

    def zero(self):
        if self.backing == "torch":
            self.kv_buffer.zero_()
        else:
            self.kv_buffer[...] = 0

    def _numel(self):
        return self.kv_buffer.numel() if self.backing == "torch" else self.kv_buffer.size


def host_indices(pages, page_size, backing="torch"):
    """Token slots of `pages` (page numbers), the way SGLang passes them."""
    slots = [p * page_size + t for p in pages for t in range(page_size)]
    if backing == "torch" and torch is not None:
        return torch.tensor(slots, dtype=torch.int64)
    return np.array(slots, dtype=np.int64)
