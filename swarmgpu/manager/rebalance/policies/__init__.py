"""One module per policy; each is ``propose(ctx) -> None`` (pure: it only calls
``ctx.accept`` with moves and adds ``ctx.notes``)."""
