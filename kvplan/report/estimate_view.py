"""Rich tables for `kvplan estimate`. Every KV row says its scope, (whole model) or (per GPU), and
its "how" text multiplies out to the value."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kvplan.plan.estimate import Estimate
from kvplan.plan.fit import Fit
from kvplan.plan.kv import KvLayout, layer_bytes_per_token, pp_layer_range, state_bytes, state_page_bytes
from kvplan.report.capacity_view import render_capacity
from kvplan.spec.encoder_params import encoder_description
from kvplan.spec.layer import Layer
from kvplan.units import fmt_bytes


def _b(n: int) -> str:
    return f"{fmt_bytes(n)}  ({n:,} B)"


def _window_lines(est: Estimate) -> list[str]:
    """One line per kind of cache: what each layer of it keeps for this request (the kind describes itself)."""
    groups: dict[tuple[str, str, int | None], list] = {}
    shared = 0
    for layer in est.spec.layers:
        if layer.kind == "shared":
            shared += 1
        for cache in layer.caches:
            key = (type(cache).__name__, cache.kind if cache.kind != "state" else repr(cache), cache.window)
            groups.setdefault(key, [cache, 0])[1] += 1
    lines = [cache.describe(count, est.ctx_tokens, est.spec.dtype) for cache, count in groups.values()
             if cache.kind != "state"]
    if shared:
        lines.append(f"{shared} KV-shared layers: read an earlier layer's K/V and hold none")
    return lines + [cache.describe(count, est.ctx_tokens, est.spec.dtype) for cache, count in groups.values()
                    if cache.kind == "state"]


def _stage_layers(lay: KvLayout) -> list[Layer]:
    """The layers of the busiest pipeline stage (what one GPU holds)."""
    stages = [[lay.spec.layers[i] for i in pp_layer_range(lay.spec.num_layers, lay.pp, r)] for r in range(lay.pp)]
    return max(stages, key=lambda ls: sum(layer_bytes_per_token(x, lay.kv_dtype, lay.tp) for x in ls))


def _per_token_how(layers: list[Layer], lay: KvLayout, tp: int) -> str:
    """'2 (K, V) × 32 layers × 8 KV heads × 128 × 2 B', one term per kind of layer."""
    terms: dict[str, int] = {}
    for layer in layers:
        key = layer.how(tp, lay.kv_dtype)
        if key and any(c.per_token for c in layer.paged):
            terms[key] = terms.get(key, 0) + 1
    return " + ".join(k.format(n=n) for k, n in terms.items()) or "no layer caches tokens (attention-free)"


def _request_how(layers: list[Layer], lay: KvLayout, tokens: int, tp: int) -> str:
    """'256 blocks (4,096/16 rounded up) × 16 tokens × 32 layers × 4,096 B', window-capped per kind."""
    bs = lay.block_size
    groups: dict[tuple[str, int, int, int], int] = {}
    compressed = 0
    for layer in layers:
        for cache in layer.paged:
            if not cache.attention:  # a compressed cache beside the window
                compressed += cache.request_bytes(tokens, bs, lay.kv_dtype, tp)
                continue
            entry, page = cache.entry_bytes(lay.kv_dtype, tp), cache.page_bytes(bs, lay.kv_dtype, tp)
            key = (cache.kind, cache.request_blocks(tokens, bs), entry, page)
            groups[key] = groups.get(key, 0) + 1
    n_state = sum(1 for layer in layers if layer.state is not None)
    state = (
        (
            f" + state: {n_state} layers × {lay.state_copies} × {state_page_bytes(lay.spec, bs, lay.kv_dtype, tp):,} B "
            "(one page per state layer, padded as vLLM pads it)"
        )
        if n_state
        else ""
    )
    if compressed:
        state += f" + compressed caches {compressed:,} B ({-(-tokens // bs):,} blocks of entries per 4 or 128 tokens)"
    if not groups:
        return state.removeprefix(" + ")  # attention-free (Mamba): the state is all a request holds
    if len(groups) == 1:
        (kind, blocks, b, page), n = next(iter(groups.items()))
        kept = f"{tokens:,}" if blocks * bs >= tokens else "window"
        per_block = f"{bs} tokens × {n} layers × {b:,} B" if page == bs * b else f"{n} layers × {page:,} B a block"
        return f"{blocks:,} blocks ({kept}/{bs} rounded up) × {per_block}" + state
    return " + ".join(f"{n} {kind} layers × {blocks:,} blocks × {_page(bs, b, page)}"
                      for (kind, blocks, b, page), n in groups.items()) + state


def _page(block_size: int, entry: int, page: int) -> str:
    """One block of one layer as a product ('16 × 4,096 B'), or its bytes when entries are not per token."""
    return f"{block_size} × {entry:,} B" if page == block_size * entry else f"{page:,} B a block"


def _token_rows(t: Table, est: Estimate) -> None:
    lay, spec = est.layout, est.spec
    t.add_row("KV per token (whole model)", _b(lay.bytes_per_token()), _per_token_how(list(spec.layers), lay, 1))
    if lay.tp > 1 or lay.pp > 1:
        stage = f" (busiest of {lay.pp} pipeline stages)" if lay.pp > 1 else ""
        t.add_row(
            "KV per token (per GPU)",
            _b(lay.bytes_per_token_per_gpu()),
            _per_token_how(_stage_layers(lay), lay, lay.tp) + stage,
        )
    everywhere = lay.bytes_per_token_all_gpus()
    if everywhere != lay.bytes_per_token():
        per_rank = everywhere // lay.tp
        t.add_row(f"KV per token (all {lay.tp * lay.pp} GPUs)", _b(everywhere),
                  f"{lay.tp} TP ranks × {per_rank:,} B: each rank keeps its own copy of the replicated "
                  + ("MLA latent" if spec.is_mla else "KV heads"))
    t.add_row(
        f"KV per block ({lay.block_size} tokens, per GPU)",
        _b(lay.bytes_per_block()),
        f"{lay.block_size} tokens × {lay.bytes_per_token_per_gpu():,} B (KV per token per GPU)"
        + (
            ": vLLM raises the block size until one attention page holds a state"
            if spec.has_state and lay.bytes_per_token()
            else ""
        ),
    )
    if spec.has_state:
        n = sum(1 for layer in spec.layers if layer.state is not None)
        t.add_row("state per request (whole model, fixed)", _b(lay.state_bytes_per_request()),
                  f"{n} state layers × {state_bytes(next(x for x in spec.layers if x.state), spec.dtype):,} B "
                  "(conv + recurrent state, as vLLM's MambaSpec sizes it); not per token")


def _request_rows(t: Table, est: Estimate) -> None:
    lay, L, n = est.layout, est.ctx_tokens, est.concurrency
    t.add_row(f"KV per request @ {L:,} tokens (paged, whole model)", _b(est.kv_bytes_per_request),
              _request_how(list(est.spec.layers), lay, L, 1))
    per_gpu = lay.request_bytes_per_gpu(L)
    if lay.tp > 1 or lay.pp > 1:
        t.add_row(
            f"KV per request @ {L:,} tokens (paged, per GPU)",
            _b(per_gpu),
            _request_how(_stage_layers(lay), lay, L, lay.tp),
        )
    if est.kv_bytes_per_request_all_full != est.kv_bytes_per_request_exact:
        t.add_row("  if every layer were full attention", _b(est.kv_bytes_per_request_all_full),
                  f"{L:,} tokens × {lay.bytes_per_token():,} B: what window-blind calculators say")
    saving = n * est.kv_bytes_per_request - est.kv_bytes_total
    prefix = f", {est.prefix_tokens:,}-token shared prefix" if est.prefix_tokens else ""
    t.add_row(
        f"KV total {n} × {L:,} (paged{prefix}, whole model)",
        _b(est.kv_bytes_total),
        f"{n} × {est.kv_bytes_per_request:,} B" + (f" − {saving:,} B of prefix blocks stored once" if saving else ""),
    )
    contiguous = lay.contiguous_request_bytes(est.max_model_len)
    t.add_row(
        f"KV total contiguous {n} × max_model_len {est.max_model_len:,} (whole model)",
        _b(est.kv_bytes_total_contiguous),
        f"{n} × {contiguous:,} B: traditional preallocation reserves max_model_len per request",
    )


def _weights_how(est: Estimate) -> str:
    spec = est.spec
    how = _weights_base_how(est)
    if spec.params.encoder:
        towers = encoder_description(spec.config)
        how += f"; {towers} {spec.params.encoder:,} of them (16-bit)"
    return how


def _weights_base_how(est: Estimate) -> str:
    spec = est.spec
    if spec.checkpoint_weights_bytes and spec.checkpoint_weights_bytes != spec.params.total * spec.dtype_bytes:
        return f"bytes of the checkpoint's weight files ({spec.params.total:,} params)"
    if spec.quant.method != "none":
        bits = spec.quant.linear_bits_x100 / 100
        return (
            f"{spec.params.total:,} params, {spec.quant.method}: linear layers at {bits:g} bits, "
            f"the rest × {spec.dtype_bytes} B"
        )
    return f"{spec.params.total:,} params × {spec.dtype_bytes} B ({spec.dtype})"


WIDE_COLUMNS = 110  # below this the tables leave out their "how" column (--json keeps every figure)


def _kv_table(est: Estimate, wide: bool) -> Table:
    """The KV bill: per token, block, request and batch, paged and contiguous, and the weights."""
    spec, lay = est.spec, est.layout
    title = (f"{spec.name}" + (f" ({spec.hf_id})" if spec.hf_id else "") +
             f" · {lay.kv_dtype.name} KV · block {lay.block_size} · tp {lay.tp} pp {lay.pp}")
    t = Table(title=title, show_header=True, header_style="bold")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_column("how", style="dim")
    _token_rows(t, est)
    _request_rows(t, est)
    t.add_row("weights (whole model)", _b(est.weights_bytes), _weights_how(est))
    return t


def _verdict(est: Estimate, f: Fit) -> str:
    if f.fits:
        return "[green]fits[/green]"
    if not f.weights_fit:
        return "[bold red]does not fit: the weights alone exceed the GPU[/bold red]"
    if not f.capacity.fits and f.kv_needed_bytes_per_gpu <= f.kv_available_bytes_per_gpu:
        return f"[bold red]does not fit: vLLM would not start at max_model_len {est.max_model_len:,}[/bold red]"
    return "[bold red]does not fit[/bold red]"


def _fit_table(est: Estimate, f: Fit, wide: bool) -> Table:
    """Whether the batch fits the GPU's KV budget, and the largest concurrency and context that do."""
    where = (f.gpu.display_name or f.gpu.name) if f.gpu else 'any GPU (--kv-cache-memory-bytes)'
    g = Table(
        title=f"{est.concurrency} × {est.ctx_tokens:,} tokens on {where}: {_verdict(est, f)}",
        show_header=True,
        header_style="bold",
    )
    g.add_column("per GPU")
    g.add_column("value", justify="right")
    g.add_column("how", style="dim")
    per = est.layout.request_bytes_per_gpu(est.ctx_tokens)
    g.add_row("KV cache available", fmt_bytes(f.kv_available_bytes_per_gpu),
              escape(f.shortfall) if f.shortfall else "vLLM's available KV cache memory (above)")
    dp = f.capacity.args.data_parallel_size
    n = -(-est.concurrency // dp)  # one replica's share with --data-parallel-size
    shared = n * per - f.kv_needed_bytes_per_gpu
    g.add_row(f"KV needed for {est.concurrency} × {est.ctx_tokens:,}" + (f" ({n} per replica)" if dp > 1 else ""),
              fmt_bytes(f.kv_needed_bytes_per_gpu), f"{n} × {per:,} B (one request's share of a GPU)"
              + (f" − {shared:,} B of prefix blocks stored once" if shared else ""))
    replicas = f" × {dp} replicas" if dp > 1 else ""
    g.add_row(
        f"largest concurrency at {est.ctx_tokens:,} tokens",
        f"{f.max_concurrency_at_ctx:,}",
        (
            f"whole requests: floor({f.kv_available_bytes_per_gpu:,} B / {per:,} B){replicas}"
            if not est.prefix_tokens
            else f"whole requests whose blocks fit, the shared prefix stored once{replicas}"
        ),
    )
    if f.vllm_concurrency_note:
        g.add_row(f"vLLM 'Maximum concurrency' at {f.capacity.max_model_len:,}", f"{f.capacity.max_concurrency:.2f}x",
                  escape(f.vllm_concurrency_note))
    g.add_row(f"longest context at concurrency {est.concurrency}", f"{f.max_ctx_at_concurrency:,} tokens",
              f"at most max_model_len {est.max_model_len:,}")
    return g


def _variants_table(est: Estimate) -> Table:
    v = Table(title="variants (KV for the whole model)", show_header=True, header_style="bold")
    for col in ("variant", "per token", "per request", f"× {est.concurrency}"):
        v.add_column(col, justify="right" if col != "variant" else "left")
    if est.fit:
        v.add_column("fits")
        v.add_column("max conc.", justify="right")
    for var in est.variants:
        row = [
            var.label,
            fmt_bytes(var.kv_bytes_per_token),
            fmt_bytes(var.kv_bytes_per_request),
            fmt_bytes(var.kv_bytes_total),
        ]
        if est.fit:
            row += ["yes" if var.fits else "no", f"{var.max_concurrency_at_ctx:,}"]
        v.add_row(*row)
    return v


def _narrow(table: Table, wide: bool) -> Table:
    """The table without its "how" column on a console too narrow for it."""
    if not wide and table.columns and table.columns[-1].header == "how":
        table.columns.pop()
    return table


def _catalog_table(est: Estimate) -> Table:
    """Without a GPU: the catalog GPUs the batch fits, at the smallest tensor-parallel size."""
    t = Table(title=f"{est.concurrency} × {est.ctx_tokens:,} tokens on the catalog's GPUs (vLLM's budget)",
              header_style="bold")
    t.add_column("GPU")
    t.add_column("fits", justify="center")
    t.add_column("TP", justify="right")
    t.add_column(f"largest concurrency at {est.ctx_tokens:,}", justify="right")
    for row in est.catalog:
        t.add_row(row.gpu.name, "[green]yes[/green]" if row.fits else "[red]no[/red]", str(row.tp),
                  f"{row.max_concurrency_at_ctx:,}")
    return t


def render_estimate(console: Console, est: Estimate) -> None:
    wide = console.width >= WIDE_COLUMNS
    for note in est.notes:
        console.print(f"[bold]note:[/bold] {escape(note)}", soft_wrap=True)
    console.print(_narrow(_kv_table(est, wide), wide))
    for line in _window_lines(est):
        console.print(f"  [dim]{line}[/dim]")
    if est.fit:
        render_capacity(console, est.fit.capacity, wide)  # vLLM's budget: components, blocks, start-up error
        console.print(_narrow(_fit_table(est, est.fit, wide), wide))
    console.print(_variants_table(est))
    if est.catalog:
        console.print(_catalog_table(est))
    if est.serve_command:
        console.print(f"[bold]as asked:[/bold] {escape(est.serve_command)}", soft_wrap=True)
    if est.hint:
        console.print(f"[yellow]{escape(est.hint)}[/yellow]", soft_wrap=True)
    if not wide:
        console.print("[dim]how each figure is computed: a terminal 110 columns wide shows it[/dim]")
