-- materialized table
-- test unique customer_id
-- test row_count min=1
SELECT c.customer_id, c.name, c.country, count(o.order_id) AS orders, coalesce(sum(o.amount), 0) AS revenue
FROM staging.customers AS c
LEFT JOIN sales.orders AS o ON o.customer_id = c.customer_id
GROUP BY ALL
