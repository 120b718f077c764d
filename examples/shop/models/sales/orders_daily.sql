-- materialized incremental
-- partitioned daily key=order_day start=2024-01-01
-- tag sales
-- description "Revenue and order count per day and status; one partition per day"
SELECT
    CAST(date_trunc('day', created_at) AS TIMESTAMP) AS order_day,
    status,
    count(*) AS orders,
    sum(amount) AS revenue
FROM sales.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
GROUP BY ALL
