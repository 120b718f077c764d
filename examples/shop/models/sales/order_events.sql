-- materialized incremental
-- partitioned daily key=created_at start=2024-01-01
-- append
-- description "An append-only log of the orders seen per day (re-runs append again)"
SELECT order_id, status, amount, created_at
FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
