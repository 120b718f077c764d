-- snapshot strategy=check unique_key=customer_id check_cols=country,tier hard_deletes=invalidate
-- description "SCD2 history of customer country and tier"
SELECT customer_id, name, country, tier
FROM staging.customers
