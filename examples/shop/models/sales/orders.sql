-- materialized incremental
-- partitioned daily key=created_at tz=UTC start=2024-01-01
-- unique_key order_id dedupe=latest_by(updated_at)
-- test not_null order_id
-- test accepted_values status=placed,shipped,returned
-- tag sales
SELECT order_id, customer_id, CAST(amount AS DECIMAL(18, 2)) AS amount, status, created_at, updated_at
FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
