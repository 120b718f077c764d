-- materialized view
-- description "Customers with normalized country codes"
SELECT customer_id, name, upper(country) AS country, tier, updated_at
FROM raw.customers
