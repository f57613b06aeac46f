/*-------------------------------------------------------------------------
 *
 * routed_plan.c
 *	  The routed statements of each registered records table, prepared once
 *	  per backend and table (SPI_keepplan) and kept until the table's
 *	  relcache entry, or the registry's, is invalidated: the claim, the
 *	  batch claim, the look and the forget, each built from the table's
 *	  quoted, qualified name, with every function and operator qualified.
 *
 * A table is looked up, and its plans forgotten, whenever its relcache
 * entry changes: it is checked again to be registered and of the shape the
 * claims expect (registry.c), so that a dropped primary key never turns
 * duplicates into claims.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "citus/citus.h"
#include "citus/routed_plan.h"
#include "tables/relations.h"

/* the registered records tables this backend knows, by OID */
static HTAB *colocated_cache = NULL;

/* the registry whose rows the cache holds (its relcache entry is watched) */
static Oid	registry_relid = InvalidOid;

/*
 * A change of a records table forgets it; a change of the registry (DROP
 * EXTENSION, say), or a reset of every relcache entry, forgets them all.
 */
static void
colocated_invalidate(Datum arg, Oid relid)
{
	HASH_SEQ_STATUS status;
	ColocatedTable *table;

	if (colocated_cache == NULL)
		return;
	hash_seq_init(&status, colocated_cache);
	while ((table = hash_seq_search(&status)) != NULL)
		if (relid == InvalidOid || relid == registry_relid ||
			relid == table->relid)
			table->valid = false;
}

/*
 * The registered records table relid, ready to claim into, for a caller on
 * the Citus coordinator (dedup_colocated_check_node): refused unless
 * registered, of the shape the claims expect, and distributed by route.  The shape is checked again whenever the table's
 * relcache entry changes (a dropped primary key would turn duplicates into
 * claims).
 */
ColocatedTable *
dedup_colocated_table(Oid relid)
{
	ColocatedTable *table;
	bool		found;

	if (colocated_cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(ColocatedTable);
		colocated_cache = hash_create("dedup colocated records", 16, &ctl,
									  HASH_ELEM | HASH_BLOBS);
		CacheRegisterRelcacheCallback(colocated_invalidate, (Datum) 0);
	}
	table = hash_search(colocated_cache, &relid, HASH_ENTER, &found);
	if (found && table->valid)
		return table;
	if (found)
	{
		for (int i = 0; i < ROUTED_STATEMENTS; i++)
			if (table->plans[i] != NULL)
				SPI_freeplan(table->plans[i]);
	}
	memset(table, 0, sizeof(ColocatedTable));
	table->relid = relid;

	{
		const DedupRelations *rels;
		Relation	registry = dedup_registry_open(&rels);
		bool		registered = dedup_registry_has(registry, relid);
		Relation	rel;

		registry_relid = RelationGetRelid(registry);

		table_close(registry, AccessShareLock);
		if (!registered)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("table \"%s\" is not a colocated records table of dedup",
							get_rel_name(relid) ? get_rel_name(relid) : "?"),
					 errdetail("Routed claims write only to the tables registered in dedup_colocated_tables, by dedup_create_colocated_records() or dedup_register_colocated_records()."),
					 errhint("Create one with dedup_create_colocated_records('processed_messages_by_customer', 'your_distributed_table'), or register an existing one with dedup_register_colocated_records().")));
		rel = table_open(relid, AccessShareLock);
		table->route_type = dedup_check_records_table(rel);
		table_close(rel, AccessShareLock);
	}
	getTypeInputInfo(table->route_type, &table->route_input,
					 &table->route_ioparam);
	table->valid = true;
	return table;
}

/*
 * "schema.=", quoted: the equality operator of the route column's type,
 * qualified with its schema, for the statements that find a record.
 */
static char *
route_equality(ColocatedTable *table)
{
	TypeCacheEntry *tc = lookup_type_cache(table->route_type, TYPECACHE_EQ_OPR);
	HeapTuple	tuple;
	Oid			opnamespace;

	if (!OidIsValid(tc->eq_opr))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("could not identify an equality operator for type %s",
						format_type_be(table->route_type))));
	tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(tc->eq_opr));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", tc->eq_opr);
	opnamespace = ((Form_pg_operator) GETSTRUCT(tuple))->oprnamespace;
	ReleaseSysCache(tuple);
	return psprintf("%s.=", quote_identifier(get_namespace_name(opnamespace)));
}

/* The statement kind of a records table, prepared once and kept. */
SPIPlanPtr
dedup_routed_plan(ColocatedTable *table, RoutedStatement kind)
{
	StringInfoData sql;
	char	   *name;
	Oid			argtypes[3];
	SPIPlanPtr	plan;

	if (table->plans[kind] != NULL)
		return table->plans[kind];

	name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(table->relid)),
									  get_rel_name(table->relid));
	argtypes[0] = table->route_type;
	argtypes[1] = TEXTOID;
	argtypes[2] = kind == ROUTED_CLAIM_MANY ? TEXTARRAYOID : TEXTOID;
	initStringInfo(&sql);
	switch (kind)
	{
		case ROUTED_CLAIM:
			appendStringInfo(&sql,
							 "INSERT INTO %s AS r (route, consumer, message_id) VALUES ($1, $2, $3) "
							 "ON CONFLICT DO NOTHING RETURNING true", name);
			break;
		case ROUTED_CLAIM_MANY:

			/*
			 * one row per key, in a single-row VALUES: Citus routes it to the
			 * shard as one statement (an INSERT ... SELECT would go through
			 * intermediate results, and two-phase commit)
			 */
			appendStringInfo(&sql,
							 "INSERT INTO %s AS r (route, consumer, message_id) "
							 "VALUES ($1, $2, pg_catalog.unnest($3)) "
							 "ON CONFLICT DO NOTHING RETURNING r.message_id", name);
			break;
		case ROUTED_SEEN:
			appendStringInfo(&sql,
							 "SELECT true FROM %s r WHERE r.route OPERATOR(%s) $1 "
							 "AND r.consumer OPERATOR(pg_catalog.=) $2 "
							 "AND r.message_id OPERATOR(pg_catalog.=) $3",
							 name, route_equality(table));
			break;
		case ROUTED_FORGET:
			appendStringInfo(&sql,
							 "DELETE FROM %s r WHERE r.route OPERATOR(%s) $1 "
							 "AND r.consumer OPERATOR(pg_catalog.=) $2 "
							 "AND r.message_id OPERATOR(pg_catalog.=) $3",
							 name, route_equality(table));
			break;
		case ROUTED_STATEMENTS:
			elog(ERROR, "unexpected routed statement %d", (int) kind);
	}
	plan = SPI_prepare(sql.data, 3, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql.data,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	table->plans[kind] = plan;
	pfree(sql.data);
	return plan;
}

/* The routing key as a value of the route column's type */
Datum
dedup_route_value(ColocatedTable *table, text *route)
{
	return OidInputFunctionCall(table->route_input, text_to_cstring(route),
								table->route_ioparam, -1);
}
