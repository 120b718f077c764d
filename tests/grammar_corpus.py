"""Corpora for DuckDB's-grammar-is-the-judge tests (``test_grammar.py``, ``test_grammar_corpus.py``).

``MALFORMED``: SELECTs DuckDB's parser rejects. ``‸`` marks where the error must be reported (it is
removed before the text is written); every text is what a user could mistype.

``FEATURES``: valid DuckDB queries over the TPC-H tables (sf 0.01), each with named output columns
and rows that do not depend on execution order, so that a table materialized by lakewrap can be
compared, as a multiset, with DuckDB running the same query itself.
"""

from __future__ import annotations

MARK = "‸"

MALFORMED: list[str] = [
    # doubled or dangling operators
    "SELECT a FROM t WHERE a > ‸> 1",
    "SELECT a FROM t WHERE a = ‸= 1",
    "SELECT a FROM t WHERE a < ‸= 1",
    "SELECT a FROM t WHERE a <> ‸> 1",
    "SELECT a + ‸FROM t",
    "SELECT a AND ‸OR b FROM t",
    "SELECT a FROM t WHERE a = ‸AND b = 1",
    "SELECT a FROM t WHERE a >= $partition_start AND‸",
    "SELECT a FROM t WHERE NOT‸",
    "SELECT a FROM t WHERE a LIKE‸",
    "SELECT a FROM t WHERE a IS‸",
    "SELECT a FROM t WHERE a IS NOT ‸FROM",
    # doubled commas and empty lists
    "SELECT a,‸, b FROM t",
    "SELECT a FROM t GROUP BY a,‸, b",
    "SELECT a FROM t WHERE a IN (1,‸, 2)",
    "SELECT [1, 2,‸, 3] AS l",
    "SELECT a FROM t WHERE a IN (‸)",
    "SELECT a FROM t WHERE a = ANY(‸)",
    "SELECT * EXCLUDE (‸) FROM t",
    "SELECT DISTINCT ON (‸) a FROM t",
    # trailing or leading commas inside calls
    "SELECT sum(a,‸) AS s FROM t",
    "SELECT f(‸,) AS s FROM t",
    "SELECT count(DISTINCT ‸) AS n FROM t",
    # joins
    "SELECT a FROM t JOIN u ‸WHERE a = 1",
    "SELECT a FROM t JOIN u‸",
    "SELECT a FROM t LEFT JOIN u ‸GROUP BY a",
    "SELECT a FROM t ASOF JOIN u‸",
    "SELECT a FROM t t1 JOIN u t2 ON‸",
    "SELECT a FROM t JOIN u ON t.a =‸",
    # BETWEEN
    "SELECT a FROM t WHERE a BETWEEN 1‸",
    "SELECT a FROM t WHERE a BETWEEN 1 ‸OR 2",
    # empty clauses
    "SELECT a FROM t WHERE‸",
    "SELECT a FROM t WHERE ‸GROUP BY a",
    "SELECT a FROM t GROUP BY ‸ORDER BY a",
    "SELECT a FROM t ORDER BY ‸LIMIT 1",
    "SELECT a FROM t HAVING‸",
    "SELECT a FROM t LIMIT‸",
    "SELECT a FROM t LIMIT 1 OFFSET‸",
    "SELECT a FROM t QUALIFY‸",
    "SELECT a FROM t ORDER BY 1,‸",
    "SELECT a FROM t UNION‸",
    "SELECT a FROM t UNION ‸ORDER BY a",
    "SELECT a FROM ‸WHERE a = 1",
    "SELECT row_number() OVER (PARTITION BY ‸) AS r FROM t",
    "SELECT row_number() OVER (ORDER BY a ROWS BETWEEN ‸) AS r FROM t",
    # parentheses, CASE, CAST, CTEs
    "SELECT a FROM t WHERE a = 1‸)",
    "SELECT a FROM t WHERE (a = 1‸",
    "SELECT CASE ‸END AS c FROM t",
    "SELECT CASE WHEN ‸THEN 1 END AS c FROM t",
    "SELECT CAST(a AS ‸) AS c FROM t",
    "SELECT CAST(a ‸) AS c FROM t",
    "WITH x AS (‸) SELECT * FROM x",
    "WITH x AS (SELECT 1)‸",
    "SELECT {'a': ‸} AS s",
    "SELECT list_transform([1], x -> ‸) AS l",
    "SELECT * REPLACE (a ‸FROM t",
    "SELECT a FROM (SELECT 1) AS‸",
]

FEATURES: list[str] = [
    # window functions and QUALIFY
    "SELECT o_orderkey, row_number() OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey) AS rn FROM orders",
    "SELECT o_custkey, o_orderkey, sum(o_totalprice) OVER (PARTITION BY o_custkey ORDER BY o_orderkey "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running FROM orders",
    "SELECT o_orderkey, lag(o_totalprice) OVER w AS prev, lead(o_totalprice, 2, 0) OVER w AS next2 FROM orders "
    "WINDOW w AS (PARTITION BY o_custkey ORDER BY o_orderkey)",
    "SELECT o_orderkey, ntile(4) OVER (ORDER BY o_totalprice, o_orderkey) AS quartile FROM orders",
    "SELECT o_orderkey, rank() OVER (PARTITION BY o_orderstatus ORDER BY o_totalprice DESC) AS r, "
    "dense_rank() OVER (PARTITION BY o_orderstatus ORDER BY o_totalprice DESC) AS dr FROM orders",
    "SELECT o_orderkey, round(percent_rank() OVER (ORDER BY o_totalprice, o_orderkey), 6) AS pr FROM orders",
    "SELECT o_orderkey, first_value(o_orderdate) OVER (PARTITION BY o_custkey ORDER BY o_orderdate, o_orderkey) "
    "AS first_day FROM orders",
    "SELECT o_custkey, o_orderkey FROM orders QUALIFY row_number() OVER (PARTITION BY o_custkey "
    "ORDER BY o_totalprice DESC, o_orderkey) = 1",
    "SELECT l_orderkey, l_linenumber FROM lineitem QUALIFY count(*) OVER (PARTITION BY l_orderkey) > 5",
    "SELECT o_orderkey, count(*) OVER (ORDER BY o_orderdate RANGE BETWEEN INTERVAL 3 DAYS PRECEDING "
    "AND CURRENT ROW) AS recent FROM orders",
    "SELECT o_orderkey, sum(o_totalprice) FILTER (WHERE o_orderstatus = 'F') OVER (PARTITION BY o_custkey) "
    "AS filled FROM orders",
    "SELECT l_orderkey, arg_max(l_linenumber, l_extendedprice) AS top_line FROM lineitem GROUP BY l_orderkey",
    # PIVOT / UNPIVOT
    "SELECT * FROM (PIVOT (SELECT o_orderpriority, o_orderstatus, o_totalprice FROM orders) "
    "ON o_orderstatus IN ('F', 'O', 'P') USING sum(o_totalprice) GROUP BY o_orderpriority)",
    "SELECT * FROM (PIVOT orders ON o_orderstatus IN ('F', 'O') USING count(*) AS n GROUP BY o_orderpriority)",
    "SELECT * FROM (UNPIVOT (SELECT n_nationkey, n_regionkey, n_nationkey * 2 AS doubled FROM nation) "
    "ON n_regionkey, doubled INTO NAME which VALUE v)",
    "SELECT * FROM (FROM nation UNPIVOT (v FOR which IN (n_regionkey)))",
    # lambdas and lists
    "SELECT n_nationkey, list_transform([n_nationkey, n_regionkey], x -> x * 10) AS tens FROM nation",
    "SELECT n_nationkey, list_filter(range(n_nationkey), x -> x % 3 = 0) AS threes FROM nation",
    "SELECT n_nationkey, list_reduce([1, 2, n_nationkey + 1], (a, b) -> a + b) AS total FROM nation",
    "SELECT n_nationkey, [x + 1 FOR x IN range(3) IF x < n_nationkey] AS comp FROM nation",
    "SELECT n_nationkey, list_sort([n_regionkey, n_nationkey, 7]) AS sorted FROM nation",
    "SELECT n_nationkey, [1, 2, 3][2] AS second, [1, 2, 3, 4][2:3] AS mid FROM nation",
    "SELECT n_nationkey, len(list_distinct([n_regionkey, n_regionkey, 1])) AS k FROM nation",
    "SELECT o_custkey, list(o_orderkey ORDER BY o_orderkey) AS orders FROM orders GROUP BY o_custkey",
    "SELECT n_regionkey, unnest(list(n_nationkey ORDER BY n_nationkey)) AS nk FROM nation GROUP BY n_regionkey",
    "SELECT r_regionkey, unnest(generate_series(1, r_regionkey + 1)) AS g FROM region",
    "SELECT n_nationkey, list_has_any([n_regionkey], [1, 2]) AS hit FROM nation",
    # structs and maps
    "SELECT n_nationkey, {'key': n_nationkey, 'name': n_name} AS s FROM nation",
    "SELECT n_nationkey, struct_pack(k := n_nationkey, r := n_regionkey).r AS r FROM nation",
    "SELECT (s).key AS k, s.name AS nm FROM (SELECT {'key': n_nationkey, 'name': n_name} AS s FROM nation)",
    "SELECT n_nationkey, map([1, 2], ['a', 'b'])[1] AS m FROM nation",
    "SELECT s.* FROM (SELECT {'a': n_nationkey, 'b': n_regionkey} AS s FROM nation)",
    "SELECT n_nationkey, struct_pack(n_nationkey, n_name) AS r FROM nation",
    # COLUMNS, EXCLUDE, REPLACE, star forms
    "SELECT COLUMNS(*) FROM region",
    "SELECT max(COLUMNS(*)) FROM nation",
    "SELECT COLUMNS('^n_.*key$') FROM nation",
    "SELECT COLUMNS(c -> c LIKE 'r_%') FROM region",
    "SELECT * EXCLUDE (n_comment) FROM nation",
    "SELECT * EXCLUDE (n_comment) REPLACE (upper(n_name) AS n_name) FROM nation",
    "SELECT nation.* EXCLUDE (n_comment), region.r_name FROM nation JOIN region ON n_regionkey = r_regionkey",
    "SELECT min(COLUMNS(* EXCLUDE (r_comment, r_name))) FROM region",
    # ASOF and other joins
    "SELECT o.o_orderkey, l.l_shipdate AS shipped FROM orders o ASOF JOIN "
    "(SELECT DISTINCT l_suppkey, l_shipdate FROM lineitem) l "
    "ON o.o_custkey % 100 = l.l_suppkey AND o.o_orderdate >= l.l_shipdate",
    "SELECT o.o_orderkey, l.l_shipdate AS shipped FROM orders o ASOF LEFT JOIN "
    "(SELECT DISTINCT l_suppkey, l_shipdate FROM lineitem) l "
    "ON o.o_custkey % 100 = l.l_suppkey AND o.o_orderdate >= l.l_shipdate",
    "SELECT c_custkey FROM customer SEMI JOIN orders ON o_custkey = c_custkey",
    "SELECT c_custkey FROM customer ANTI JOIN orders ON o_custkey = c_custkey",
    "SELECT n.n_name, r.r_name FROM nation n JOIN (SELECT r_regionkey AS n_regionkey, r_name FROM region) r "
    "USING (n_regionkey)",
    "SELECT n_name, r_name FROM nation NATURAL JOIN (SELECT r_regionkey AS n_regionkey, r_name FROM region)",
    "SELECT n_name, top.o_orderkey FROM nation, LATERAL (SELECT o_orderkey FROM orders "
    "WHERE o_custkey = n_nationkey ORDER BY o_orderkey LIMIT 1) top",
    "SELECT a.n_nationkey AS x, b.n_nationkey AS y FROM nation a CROSS JOIN nation b WHERE a.n_nationkey < 3",
    "SELECT p_partkey, ps_suppkey FROM part LEFT JOIN partsupp ON ps_partkey = p_partkey AND ps_availqty > 9000",
    "SELECT s_suppkey FROM supplier FULL OUTER JOIN nation ON s_nationkey = n_nationkey WHERE s_suppkey < 5",
    # grouping
    "SELECT o_orderstatus, o_orderpriority, count(*) AS n FROM orders GROUP BY ALL",
    "SELECT o_orderstatus, count(*) AS n FROM orders GROUP BY ROLLUP (o_orderstatus)",
    "SELECT o_orderstatus, o_orderpriority, count(*) AS n, grouping(o_orderstatus, o_orderpriority) AS g "
    "FROM orders GROUP BY CUBE (o_orderstatus, o_orderpriority)",
    "SELECT o_orderstatus, o_orderpriority, sum(o_totalprice) AS t FROM orders "
    "GROUP BY GROUPING SETS ((o_orderstatus), (o_orderpriority), ())",
    "SELECT o_orderstatus, count(*) FILTER (WHERE o_totalprice > 100000) AS big FROM orders GROUP BY 1",
    "SELECT DISTINCT ON (o_custkey) o_custkey, o_orderkey FROM orders ORDER BY o_custkey, o_orderkey",
    "SELECT o_orderpriority, string_agg(DISTINCT o_orderstatus, ',' ORDER BY o_orderstatus) AS s "
    "FROM orders GROUP BY o_orderpriority",
    "SELECT l_returnflag, median(l_quantity) AS med, quantile_cont(l_quantity, 0.9) AS p90, "
    "mode(l_linestatus) AS m FROM lineitem GROUP BY l_returnflag",
    "SELECT l_returnflag, count(*) AS n FROM lineitem GROUP BY l_returnflag HAVING count(*) > 10 ORDER BY ALL",
    "SELECT bool_and(o_totalprice > 0) AS all_pos, bool_or(o_orderstatus = 'P') AS some_p FROM orders",
    # set operations
    "SELECT n_name AS name FROM nation UNION SELECT r_name FROM region",
    "SELECT n_name AS name FROM nation UNION ALL SELECT r_name FROM region",
    "SELECT n_regionkey AS k FROM nation EXCEPT SELECT r_regionkey FROM region WHERE r_regionkey > 2",
    "SELECT n_regionkey AS k FROM nation INTERSECT SELECT r_regionkey FROM region",
    "SELECT n_nationkey AS a FROM nation UNION BY NAME SELECT r_regionkey AS a, r_name AS b FROM region",
    "SELECT n_regionkey AS k FROM nation EXCEPT ALL SELECT r_regionkey FROM region",
    # CTEs and subqueries
    "WITH big AS (SELECT * FROM orders WHERE o_totalprice > 300000) SELECT count(*) AS n FROM big",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT n FROM r",
    "WITH a AS MATERIALIZED (SELECT n_nationkey FROM nation) SELECT n_nationkey FROM a WHERE n_nationkey > 20",
    "SELECT c_custkey FROM customer WHERE c_custkey IN (SELECT o_custkey FROM orders WHERE o_totalprice > 400000)",
    "SELECT c_custkey FROM customer c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.o_custkey = c.c_custkey "
    "AND o.o_orderstatus = 'P')",
    "SELECT o_orderkey FROM orders WHERE o_totalprice > ALL (SELECT o_totalprice * 0.99 FROM orders)",
    "SELECT n_nationkey, (SELECT count(*) FROM supplier WHERE s_nationkey = n_nationkey) AS suppliers FROM nation",
    "FROM region SELECT r_name, r_regionkey",
    "FROM region",
    # expressions and operators
    "SELECT n_nationkey, n_nationkey // 3 AS q, n_nationkey % 3 AS r, 2 ** 3 AS p, n_nationkey << 2 AS sh, "
    "n_nationkey >> 1 AS sr FROM nation",
    "SELECT n_nationkey, n_name || '-' || n_regionkey AS label, n_name[1:3] AS pre FROM nation",
    "SELECT n_nationkey, n_name ILIKE 'a%' AS a, n_name ~~ '%A%' AS b, n_name SIMILAR TO '[A-C].*' AS c FROM nation",
    "SELECT n_nationkey, n_name ^@ 'A' AS starts_a, starts_with(n_name, 'B') AS starts_b FROM nation",
    "SELECT n_nationkey, regexp_matches(n_name, '^[AEIOU]') AS vowel, regexp_replace(n_name, 'A', 'a', 'g') AS r "
    "FROM nation",
    "SELECT n_nationkey, n_regionkey IS DISTINCT FROM 1 AS d, n_regionkey IS NOT DISTINCT FROM NULL AS nd FROM nation",
    "SELECT n_nationkey, CASE WHEN n_regionkey = 0 THEN 'zero' WHEN n_regionkey < 3 THEN 'low' ELSE 'high' END "
    "AS band FROM nation",
    "SELECT n_nationkey, CASE n_regionkey WHEN 1 THEN 'one' END AS one FROM nation",
    "SELECT n_nationkey, n_nationkey::VARCHAR AS s, TRY_CAST(n_name AS INTEGER) AS bad, "
    "CAST(n_regionkey AS DOUBLE) AS d FROM nation",
    "SELECT n_nationkey, coalesce(NULLIF(n_regionkey, 0), -1) AS c, greatest(n_regionkey, 2) AS g, "
    "least(n_regionkey, 2) AS l FROM nation",
    "SELECT o_orderkey, date_trunc('month', o_orderdate) AS m, extract(year FROM o_orderdate) AS y, "
    "o_orderdate + INTERVAL 1 MONTH AS next, strftime(o_orderdate, '%Y/%m') AS ym FROM orders",
    "SELECT o_orderkey, o_orderdate - DATE '1995-01-01' AS days, datediff('day', DATE '1995-01-01', o_orderdate) "
    "AS dd FROM orders",
    "SELECT o_orderkey, o_orderdate BETWEEN DATE '1995-01-01' AND DATE '1995-12-31' AS in95 FROM orders",
    "SELECT o_orderkey FROM orders WHERE o_orderdate NOT BETWEEN DATE '1993-01-01' AND DATE '1997-12-31'",
    "SELECT n_nationkey, hash(n_name) % 7 AS bucket, md5(n_name) AS h FROM nation",
    "SELECT n_nationkey, concat_ws('/', n_name, n_regionkey) AS p, format('{}-{}', n_name, n_nationkey) AS f, "
    "printf('%05d', n_nationkey) AS z FROM nation",
    "SELECT n_nationkey, 'it''s' AS quote, E'tab\\there' AS esc, $$dollar$$ AS d FROM nation",
    "SELECT n_nationkey, \"n_name\" AS \"Quoted Name\" FROM nation",
    "SELECT n_nationkey /* a block comment */, n_name -- a line comment\nFROM nation",
    "SELECT n_nationkey, n_nationkey IN (1, 2, 3) AS small, n_nationkey NOT IN (4, 5) AS not45 FROM nation",
    "SELECT o_orderkey, round(o_totalprice / 3, 2) AS third, floor(o_totalprice) AS fl, "
    "abs(-o_totalprice) AS ab FROM orders",
    "SELECT o_orderkey FROM orders ORDER BY o_totalprice DESC NULLS LAST, o_orderkey LIMIT 10 OFFSET 5",
    "SELECT n_nationkey, json_extract_string(json_object('k', n_name), '$.k') AS k, "
    "to_json({'a': n_nationkey}) AS j FROM nation",
    "SELECT n_nationkey, list_value(n_nationkey, n_regionkey) AS l, array_length([1, 2]) AS al FROM nation",
    "SELECT n_nationkey, (n_nationkey > 5)::INTEGER AS flag, NOT (n_regionkey = 1) AS not1 FROM nation",
    "SELECT n_nationkey, lambda_x FROM (SELECT n_nationkey, list_apply([n_nationkey], lambda v: v + 1) AS lambda_x "
    "FROM nation)",
    "SELECT count(*) AS n, count(DISTINCT o_custkey) AS custs, approx_count_distinct(o_custkey) > 0 AS some "
    "FROM orders",
    "SELECT l_shipmode, sum(l_extendedprice * (1 - l_discount)) AS revenue FROM lineitem "
    "WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR GROUP BY l_shipmode",
    "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(id, name)",
    "SELECT * FROM range(5) t(i)",
    "SELECT i, i * i AS sq FROM generate_series(1, 5) s(i)",
]
