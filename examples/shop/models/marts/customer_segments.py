"""A Python model: each customer's revenue segment, computed with pyarrow (docs/python-models.md)."""

import lakewrap


@lakewrap.model(
    materialized="table",
    test=["unique customer_id", "accepted_values segment=top,regular,new"],
    description="Customers by revenue: the top fifth, the rest who ordered, and those who did not yet",
)
def customer_segments(ctx):
    import pyarrow as pa  # inside the function: `lakewrap compile` never loads pyarrow
    import pyarrow.compute as pc

    revenue = ctx.ref("marts.revenue_by_customer").to_arrow_table()
    ordered = pc.filter(revenue["revenue"], pc.greater(revenue["revenue"], 0))
    top = pc.quantile(ordered, q=0.8)[0].as_py() if len(ordered) else 0
    segments = [
        "new" if amount == 0 else "top" if amount >= top else "regular"
        for amount in revenue["revenue"].to_pylist()
    ]
    ctx.log(f"{len(revenue)} customers, top segment from {top:.2f}")
    return pa.table({
        "customer_id": revenue["customer_id"],
        "revenue": revenue["revenue"],
        "segment": pa.array(segments, pa.string()),
    })
