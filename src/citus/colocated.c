/*-------------------------------------------------------------------------
 *
 * colocated.c
 *	  Records colocated with the business rows on a Citus cluster: a
 *	  distributed table per colocation group, created and registered by
 *	  dedup_create_colocated_records() (or made by hand, or left by DROP
 *	  EXTENSION, and registered by dedup_register_colocated_records()),
 *	  claimed by routing key (dedup_claim_routed(), dedup_claim_routed_many(),
 *	  dedup_seen_routed()) and forgotten (dedup_forget_routed()); their
 *	  sweep and storage figures are colocated_sweep.c's.
 *
 * A records table is an ordinary user table (the caller's, not a member of
 * the extension), distributed by its route column and colocated with the
 * business table: the record of a message lives in the shard, on the
 * worker, that holds the business row it is about, and moves with it
 * (citus_move_shard_placement, the rebalancer).  The claim is INSERT ...
 * ON CONFLICT DO NOTHING into it, run through SPI on the coordinator, so
 * that Citus's planner routes it by the routing key to that shard, over
 * the connection the transaction's update of the business row uses: claim
 * and update commit on one worker, in one transaction, with Citus's
 * one-phase commit, and the speculative insertion (the row lock of a
 * concurrent claimer, the answers under every isolation level) happens in
 * the worker's shard, exactly as the statement does it on one node.
 *
 * Unlike the local claim (claim_writer.c), the statement runs as the
 * caller, with the caller's privileges on the table: a role that claims
 * needs INSERT and SELECT on it, and the registry (dedup_colocated_tables)
 * is what keeps the table argument from naming any other table.  The
 * extension's local tables are only read here (the registry, the claimant
 * mapping, the windows): no two-phase commit is asked for (citus.c), unless
 * the transaction also writes on the coordinator (dedup_citus_routed_write).
 *
 * A records table carries no code of its owner's that a claim or the sweep
 * would run (no trigger but TRUNCATE ones, no rule, no row security):
 * refused at registration, and at every claim, sweep and count after a
 * change.  A dropped records table leaves the registry through the
 * extension's sql_drop event trigger (dedup_colocated_dropped), so that a
 * table given its OID later is not taken for it.
 *
 * The statements are prepared once per backend and table (SPI_keepplan),
 * and dropped when the table's relcache entry, or the registry's, is
 * invalidated.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "rewrite/rewriteHandler.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/ruleutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
#include "utils/varlena.h"

#include "audit.h"
#include "citus/citus.h"
#include "citus/colocated.h"
#include "claim/claim.h"
#include "claim/claimants.h"
#include "compat.h"
#include "guc.h"
#include "keys.h"
#include "stats/claim_stats.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_create_colocated_records);
PG_FUNCTION_INFO_V1(dedup_register_colocated_records);
PG_FUNCTION_INFO_V1(dedup_claim_routed);
PG_FUNCTION_INFO_V1(dedup_claim_routed_many);
PG_FUNCTION_INFO_V1(dedup_seen_routed);
PG_FUNCTION_INFO_V1(dedup_forget_routed);
PG_FUNCTION_INFO_V1(dedup_colocated_dropped);

/* the columns of a records table, in this order */
#define ROUTE_ATTNUM 1
#define CONSUMER_ATTNUM 2
#define MESSAGE_ID_ATTNUM 3
#define PROCESSED_AT_ATTNUM 4
#define RECORDS_NATTS 4

/* the statements prepared per records table */
typedef enum RoutedStatement
{
	ROUTED_CLAIM,
	ROUTED_CLAIM_MANY,
	ROUTED_SEEN,
	ROUTED_FORGET,
	ROUTED_STATEMENTS
} RoutedStatement;

/* a registered records table, as this backend knows it */
typedef struct ColocatedTable
{
	Oid			relid;			/* hash key */
	bool		valid;			/* false: look it up again */
	Oid			route_type;
	Oid			route_input;	/* its input function */
	Oid			route_ioparam;
	SPIPlanPtr	plans[ROUTED_STATEMENTS];
} ColocatedTable;

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

/* Refuse colocated records where Citus is not, or on a worker. */
void
dedup_colocated_check_node(const char *function)
{
	int32		group = dedup_citus_group();

	if (group < 0)
		ereport(ERROR,
				errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				errmsg("%s needs Citus", function),
				errdetail("Colocated records are distributed tables of a Citus cluster; the citus extension is not installed in this database."),
				errhint("Without Citus, keep the records in processed_messages: claim with dedup_claim(), look with dedup_seen(), forget with dedup_forget()."));
	if (group != 0)
		ereport(ERROR,
				errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				errmsg("%s must be called on the Citus coordinator", function),
				errdetail("This node is in Citus group %d; colocated records are reached through the coordinator's distributed planner.",
						  group),
				errhint("Call it on the coordinator, in the transaction that updates the business rows."));
}

/*
 * The registry, dedup_colocated_tables, opened with AccessShareLock, with
 * the extension's tables in *rels; only read: no two-phase commit is asked
 * for (citus.c).
 */
Relation
dedup_registry_open(const DedupRelations **rels)
{
	Relation	registry = NULL;
	bool		was = dedup_citus_reading_only(true);

	PG_TRY();
	{
		*rels = dedup_relations(false);
		if (OidIsValid((*rels)->colocated))
			registry = table_open((*rels)->colocated, AccessShareLock);
	}
	PG_FINALLY();
	{
		dedup_citus_reading_only(was);
	}
	PG_END_TRY();
	if (registry == NULL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("extension \"dedup\" has no colocated records before version 1.2"),
				errhint("Run ALTER EXTENSION dedup UPDATE."));
	return registry;
}

/* Is records in the registry? */
bool
dedup_registry_has(Relation registry, Oid records)
{
	ScanKeyData key;
	SysScanDesc scan;
	bool		found;

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(records));
	scan = systable_beginscan(registry, InvalidOid, false, NULL, 1, &key);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	return found;
}

/*
 * The registered records tables that still exist, in registration order
 * (the caller's memory context).
 */
List *
dedup_colocated_tables(const DedupRelations *rels)
{
	Relation	registry;
	SysScanDesc scan;
	HeapTuple	tuple;
	List	   *tables = NIL;

	if (!OidIsValid(rels->colocated))
		return NIL;
	registry = table_open(rels->colocated, AccessShareLock);
	scan = systable_beginscan(registry, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		bool		isnull;
		Oid			relid = DatumGetObjectId(heap_getattr(tuple, 1,
														  RelationGetDescr(registry),
														  &isnull));

		if (!isnull && SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
			tables = lappend_oid(tables, relid);
	}
	systable_endscan(scan);
	table_close(registry, AccessShareLock);
	return tables;
}

/* Raise the error for a records table of the wrong shape. */
static void
refuse_shape(Relation rel, const char *what)
{
	ereport(ERROR,
			errcode(ERRCODE_WRONG_OBJECT_TYPE),
			errmsg("table \"%s\" is not usable as colocated records", RelationGetRelationName(rel)),
			errdetail("%s", what),
			errhint("Records tables are made by dedup_create_colocated_records(); one made otherwise must have exactly that shape, and none may be altered."));
}

/* Check a column of a records table: its name and (unless InvalidOid) type */
static Oid
check_column(Relation rel, AttrNumber attnum, const char *name, Oid type)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Form_pg_attribute att;

	if (attnum > desc->natts)
		refuse_shape(rel, "It lacks a column of route, consumer, message_id and processed_at.");
	att = TupleDescAttr(desc, attnum - 1);
	if (att->attisdropped || strcmp(NameStr(att->attname), name) != 0 ||
		(OidIsValid(type) && att->atttypid != type))
		refuse_shape(rel, "Its columns must be route, consumer text, message_id text and processed_at timestamptz, in this order.");
	if (!att->attnotnull)
		refuse_shape(rel, "Its columns must all be NOT NULL.");
	return att->atttypid;
}

/* Are key's columns, in this order, the first key columns of index? */
static bool
index_is_on(Form_pg_index index, const AttrNumber *key, int nkey)
{
	if (index->indnkeyatts < nkey)
		return false;
	for (int i = 0; i < nkey; i++)
		if (index->indkey.values[i] != key[i])
			return false;
	return true;
}

/*
 * Check the indexes of a records table: its primary key on (route,
 * consumer, message_id), the claim's ON CONFLICT target, no other unique
 * index or exclusion constraint (a claim would be a duplicate of another
 * key), and a btree index led by (consumer, processed_at), the sweep's.
 */
static void
check_indexes(Relation rel)
{
	static const AttrNumber primary_key[] = {
		ROUTE_ATTNUM, CONSUMER_ATTNUM, MESSAGE_ID_ATTNUM
	};
	static const AttrNumber sweep_key[] = {
		CONSUMER_ATTNUM, PROCESSED_AT_ATTNUM
	};
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		has_primary_key = false;
	bool		has_sweep_index = false;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		bool		plain = form->indisvalid &&
			heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, NULL) &&
			heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, NULL);

		if (form->indisprimary)
			has_primary_key = plain && form->indnatts == lengthof(primary_key) &&
				index_is_on(form, primary_key, lengthof(primary_key));
		else if (form->indisunique || form->indisexclusion)
			ereport(ERROR,
					errcode(ERRCODE_WRONG_OBJECT_TYPE),
					errmsg("table \"%s\" is not usable as colocated records",
						   RelationGetRelationName(rel)),
					errdetail("It has the unique index or exclusion constraint \"%s\" besides its primary key: a claim of one key would be a duplicate of another.",
							  RelationGetRelationName(index)),
					errhint("Drop it: the primary key (route, consumer, message_id) is the only key of a records table."));
		else if (plain && index->rd_rel->relam == BTREE_AM_OID &&
				 index_is_on(form, sweep_key, lengthof(sweep_key)))
			has_sweep_index = true;
		index_close(index, AccessShareLock);
	}
	list_free(indexes);
	if (!has_primary_key)
		refuse_shape(rel, "Its primary key must be (route, consumer, message_id), in this order: the claim is an INSERT ... ON CONFLICT DO NOTHING on it.");
	if (!has_sweep_index)
		refuse_shape(rel, "It lacks a btree index on (consumer, processed_at), which the sweep and the storage figures read by.");
}

/* Does processed_at default to the transaction's time (now())? */
static bool
defaults_to_now(Relation rel)
{
	Node	   *def = build_column_default(rel, PROCESSED_AT_ATTNUM);

	if (def == NULL)
		return false;
	if (IsA(def, FuncExpr))
	{
		Oid			func = ((FuncExpr *) def)->funcid;

		return func == F_NOW || func == F_TRANSACTION_TIMESTAMP;
	}
	if (IsA(def, SQLValueFunction))
		return ((SQLValueFunction *) def)->op == SVFOP_CURRENT_TIMESTAMP;
	return false;
}

/*
 * Refuse a records table that carries code of its owner's that the sweep,
 * or a claim, would run: a trigger (but a TRUNCATE-only one, which Citus
 * puts on every distributed table and no DELETE or INSERT fires), a rule, or
 * row security (whose policies may call functions).  The sweep runs as the
 * table's owner, so such code could only ever act with the owner's rights;
 * refused all the same, as it could delete or keep what it likes, or hold
 * the sweeper (colocated_sweep.c).
 */
static void
check_no_user_code(Relation rel)
{
	if (rel->trigdesc != NULL)
	{
		for (int i = 0; i < rel->trigdesc->numtriggers; i++)
		{
			Trigger    *trigger = &rel->trigdesc->triggers[i];

			if (trigger->tgtype != TRIGGER_TYPE_TRUNCATE)
				ereport(ERROR,
						errcode(ERRCODE_WRONG_OBJECT_TYPE),
						errmsg("table \"%s\" is not usable as colocated records",
							   RelationGetRelationName(rel)),
						errdetail("It has trigger \"%s\", whose code the sweep and the claims would run.",
								  trigger->tgname),
						errhint("Drop it (a foreign key referencing the table has triggers on it too); records tables carry no triggers, rules or row security."));
		}
	}
	if (rel->rd_rules != NULL)
		ereport(ERROR,
				errcode(ERRCODE_WRONG_OBJECT_TYPE),
				errmsg("table \"%s\" is not usable as colocated records",
					   RelationGetRelationName(rel)),
				errdetail("It has a rule, which would rewrite the sweep's and the claims' statements."),
				errhint("Drop each of its rules with DROP RULE; records tables carry no triggers, rules or row security."));
	if (rel->rd_rel->relrowsecurity || rel->rd_rel->relforcerowsecurity)
		ereport(ERROR,
				errcode(ERRCODE_WRONG_OBJECT_TYPE),
				errmsg("table \"%s\" is not usable as colocated records",
					   RelationGetRelationName(rel)),
				errdetail("Row security is enabled on it: its policies would decide which rows the sweep and the claims see, and run their functions."),
				errhint("Run ALTER TABLE ... DISABLE ROW LEVEL SECURITY and NO FORCE ROW LEVEL SECURITY on it."));
}

/*
 * Check that rel has exactly the shape of the records tables
 * dedup_create_colocated_records() makes, and that it is hash-distributed
 * by its route column: what a claim, its answer, the sweep and the commit
 * on the worker rely on.  Returns the type of the route column.
 */
static Oid
check_records_table(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			ncolumns = 0;
	Oid			route_type;

	if (rel->rd_rel->relkind != RELKIND_RELATION)
		refuse_shape(rel, "It is not an ordinary table.");
	for (int i = 0; i < desc->natts; i++)
		if (!TupleDescAttr(desc, i)->attisdropped)
			ncolumns++;
	if (ncolumns != RECORDS_NATTS)
		refuse_shape(rel, "Its columns must be route, consumer text, message_id text and processed_at timestamptz, in this order, and no others.");
	route_type = check_column(rel, ROUTE_ATTNUM, "route", InvalidOid);
	check_column(rel, CONSUMER_ATTNUM, "consumer", TEXTOID);
	check_column(rel, MESSAGE_ID_ATTNUM, "message_id", TEXTOID);
	check_column(rel, PROCESSED_AT_ATTNUM, "processed_at", TIMESTAMPTZOID);
	if (!defaults_to_now(rel))
		refuse_shape(rel, "Its column processed_at must default to now(): a claim inserts no time.");
	check_indexes(rel);
	check_no_user_code(rel);
	if (!dedup_citus_distributed(RelationGetRelid(rel)))
		refuse_shape(rel, "It is not a distributed table: a claim in it would commit on the coordinator apart from the business update on the worker.");
	if (dedup_citus_hash_column(RelationGetRelid(rel)) != ROUTE_ATTNUM)
		refuse_shape(rel, "It must be hash-distributed by its route column, as the business table is by its key: a claim must land in the shard of the business row.");
	return route_type;
}

/*
 * Check records (registered) as a claim does, before each sweep and count
 * of it: its shape may have changed since it was registered.  Raises the
 * refusal of check_records_table().  The table stays locked in lockmode
 * until the end of the transaction: a sweep passes RowExclusiveLock, which
 * keeps a trigger from being created or enabled between this check and its
 * DELETEs (rules and row security take stronger locks still).  Returns its
 * schema-qualified, quoted name.
 */
char *
dedup_colocated_check_table(Oid records, LOCKMODE lockmode)
{
	Relation	rel = table_open(records, lockmode);
	char	   *name;

	check_records_table(rel);
	name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
	table_close(rel, NoLock);
	return name;
}

/*
 * The registered records table relid, ready to claim into: refused unless
 * on a Citus coordinator, registered, of the shape the claims expect, and
 * distributed by route.  The shape is checked again whenever the table's
 * relcache entry changes (a dropped primary key would turn duplicates into
 * claims).
 */
static ColocatedTable *
colocated_table(Oid relid, const char *function)
{
	ColocatedTable *table;
	bool		found;

	dedup_colocated_check_node(function);
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
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("table \"%s\" is not a colocated records table of dedup",
						   get_rel_name(relid) ? get_rel_name(relid) : "?"),
					errdetail("Routed claims write only to the tables registered in dedup_colocated_tables, by dedup_create_colocated_records() or dedup_register_colocated_records()."),
					errhint("Create one with dedup_create_colocated_records('processed_messages_by_customer', 'your_distributed_table'), or register an existing one with dedup_register_colocated_records()."));
		rel = table_open(relid, AccessShareLock);
		table->route_type = check_records_table(rel);
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
				errcode(ERRCODE_UNDEFINED_FUNCTION),
				errmsg("could not identify an equality operator for type %s",
					   format_type_be(table->route_type)));
	tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(tc->eq_opr));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", tc->eq_opr);
	opnamespace = ((Form_pg_operator) GETSTRUCT(tuple))->oprnamespace;
	ReleaseSysCache(tuple);
	return psprintf("%s.=", quote_identifier(get_namespace_name(opnamespace)));
}

/* The statement kind of a records table, prepared once and kept. */
static SPIPlanPtr
routed_plan(ColocatedTable *table, RoutedStatement kind)
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
			 * one row per key, in a single-row VALUES: Citus routes it to
			 * the shard as one statement (an INSERT ... SELECT would go
			 * through intermediate results, and two-phase commit)
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
static Datum
route_value(ColocatedTable *table, text *route)
{
	return OidInputFunctionCall(table->route_input, text_to_cstring(route),
								table->route_ioparam, -1);
}

/* what routed_begin() checks besides the first three arguments */
#define ROUTED_KEY		0x01	/* the fourth, a message id */
#define ROUTED_WRITES	0x02	/* not in recovery or a read-only transaction */
#define ROUTED_CLAIMANT 0x04	/* the claimant mapping (not for a forget) */

/*
 * The checks every routed entry point makes on its arguments (records,
 * route, consumer and, with ROUTED_KEY, message_id; message_ids are left to
 * the caller), then the node, the registry and (ROUTED_CLAIMANT) the
 * claimant.
 */
static ColocatedTable *
routed_begin(FunctionCallInfo fcinfo, const char *name, const char *call,
			 int checks)
{
	ColocatedTable *table;
	bool		was;

	dedup_check_not_null(name, "records", 0, PG_ARGISNULL(0));
	dedup_check_not_null(name, "route", 0, PG_ARGISNULL(1));
	dedup_check_key(name, "consumer", 0, PG_GETARG_DATUM(2), PG_ARGISNULL(2),
					DEDUP_MAX_CONSUMER_BYTES);
	if (checks & ROUTED_KEY)
		dedup_check_key(name, "message_id", 0, PG_GETARG_DATUM(3),
						PG_ARGISNULL(3), DEDUP_MAX_MESSAGE_ID_BYTES);
	if (checks & ROUTED_WRITES)
	{
		PreventCommandDuringRecovery(call);
		PreventCommandIfReadOnly(call);
	}
	table = colocated_table(PG_GETARG_OID(0), call);
	if (checks & ROUTED_WRITES)
		dedup_citus_routed_write();
	if (!(checks & ROUTED_CLAIMANT))
		return table;
	was = dedup_citus_reading_only(true);
	PG_TRY();
	{
		dedup_check_claimant(PG_GETARG_TEXT_PP(2), call);
	}
	PG_FINALLY();
	{
		dedup_citus_reading_only(was);
	}
	PG_END_TRY();
	return table;
}

/*
 * Run a prepared statement of table with values; count its outcome as
 * nkeys claims (when counting) whose claimed ones are those it returned,
 * and return the rows it returned (SPI_tuptable is valid until
 * SPI_finish, which the caller calls).
 */
static uint64
routed_execute(ColocatedTable *table, RoutedStatement kind, Datum *values,
			   text *consumer, int nkeys, bool count)
{
	MemoryContext caller_context = CurrentMemoryContext;
	DedupClaimTally tally = {0};
	instr_time	start;
	SPIPlanPtr	plan;
	int			rc;
	uint64		rows;

	if (count && dedup_track_claims)
		INSTR_TIME_SET_CURRENT(start);
	PG_TRY();
	{
		plan = routed_plan(table, kind);
		rc = SPI_execute_plan(plan, values, NULL, kind == ROUTED_SEEN, 0);
		if (rc < 0)
			elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	}
	PG_CATCH();
	{
		if (count)
		{
			int			code = geterrcode();

			MemoryContextSwitchTo(caller_context);
			dedup_stats_tally(&tally, dedup_claim_failure(code), false, &start);
			dedup_stats_flush(consumer, NULL, &tally);
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	rows = SPI_processed;
	if (count)
	{
		/* the batch's time is shared by its keys, as a lock wait is not seen */
		for (uint64 i = 0; i < (uint64) nkeys; i++)
			dedup_stats_tally(&tally, i < rows ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  false, &start);
		dedup_stats_flush(consumer, NULL, &tally);
	}
	return rows;
}

/*
 * The entry points of one key (records, route, consumer, message_id):
 * claim, seen and forget.  Check what checks asks for besides the key, run
 * the statement kind (a claim counted as one), and say whether it found or
 * wrote a row.
 */
static bool
routed_one_key(FunctionCallInfo fcinfo, RoutedStatement kind,
			   const char *name, int checks)
{
	ColocatedTable *table = routed_begin(fcinfo, name, psprintf("%s()", name),
										 ROUTED_KEY | checks);
	bool		claim = kind == ROUTED_CLAIM;
	Datum		values[3];
	uint64		rows;

	values[0] = route_value(table, PG_GETARG_TEXT_PP(1));
	values[1] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	values[2] = PointerGetDatum(PG_GETARG_TEXT_PP(3));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rows = routed_execute(table, kind, values,
						  claim ? PG_GETARG_TEXT_PP(2) : NULL, claim ? 1 : 0,
						  claim);
	SPI_finish();
	return rows > 0;
}

/*
 * dedup_claim_routed(records regclass, route text, consumer text,
 * message_id text) RETURNS boolean
 *
 * dedup_claim's answer for a claim kept in the colocated records table
 * records, in the shard of route (a value of its route column, as text):
 * true when this transaction has just recorded it, false when it was
 * recorded before.  Never NULL.
 */
Datum
dedup_claim_routed(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(routed_one_key(fcinfo, ROUTED_CLAIM, "dedup_claim_routed",
								  ROUTED_WRITES | ROUTED_CLAIMANT));
}

/* bytewise order of keys, as claim.c's batches are claimed */
static int
text_compare(const void *a, const void *b)
{
	text	   *ta = *(text *const *) a;
	text	   *tb = *(text *const *) b;
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			cmp = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	if (cmp != 0)
		return cmp;
	return la < lb ? -1 : (la > lb ? 1 : 0);
}

/*
 * dedup_claim_routed_many(records regclass, route text, consumer text,
 * message_ids text[]) RETURNS boolean[]
 *
 * dedup_claim_many for a batch of one routing key, in one routed
 * statement: element i is true when message_ids[i] was claimed now, false
 * when it is a duplicate, of an earlier claim or of an earlier element.
 * The distinct keys are inserted in bytewise order, so that two batches
 * with keys in common lock them in the same order.
 */
Datum
dedup_claim_routed_many(PG_FUNCTION_ARGS)
{
	ColocatedTable *table;
	ArrayType  *array;
	Datum	   *elements;
	bool	   *nulls;
	int			nkeys;
	int			ndistinct = 0;
	text	  **sorted;
	text	  **claimed;
	Datum	   *results;
	Datum		values[3];
	uint64		rows;
	int			lbound = 1;
	instr_time	start;

	if (PG_ARGISNULL(3))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("argument \"message_ids\" of dedup_claim_routed_many must not be null"));
	array = PG_GETARG_ARRAYTYPE_P(3);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				errmsg("argument \"message_ids\" of dedup_claim_routed_many must be a one-dimensional array"));
	nkeys = ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
	if (nkeys > DEDUP_MAX_BATCH_KEYS)
		ereport(ERROR,
				errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				errmsg("argument \"message_ids\" of dedup_claim_routed_many has too many elements"),
				errdetail("It has %d elements; at most %d are accepted.",
						  nkeys, DEDUP_MAX_BATCH_KEYS),
				errhint("Claim a larger batch in several calls, in the same transaction."));
	deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT,
					  &elements, &nulls, &nkeys);
	for (int i = 0; i < nkeys; i++)
		dedup_check_key("dedup_claim_routed_many", "message_ids", i + 1,
						elements[i], nulls[i], DEDUP_MAX_MESSAGE_ID_BYTES);
	table = routed_begin(fcinfo, "dedup_claim_routed_many",
						 "dedup_claim_routed_many()",
						 ROUTED_WRITES | ROUTED_CLAIMANT);
	if (nkeys == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(BOOLOID));

	sorted = palloc(nkeys * sizeof(text *));
	for (int i = 0; i < nkeys; i++)
		sorted[i] = DatumGetTextPP(elements[i]);
	qsort(sorted, nkeys, sizeof(text *), text_compare);
	for (int i = 0; i < nkeys; i++)
		if (ndistinct == 0 || text_compare(&sorted[ndistinct - 1], &sorted[i]) != 0)
			sorted[ndistinct++] = sorted[i];

	values[0] = route_value(table, PG_GETARG_TEXT_PP(1));
	values[1] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	{
		Datum	   *keys = palloc(ndistinct * sizeof(Datum));

		for (int i = 0; i < ndistinct; i++)
			keys[i] = PointerGetDatum(sorted[i]);
		values[2] = PointerGetDatum(construct_array(keys, ndistinct, TEXTOID,
													-1, false, TYPALIGN_INT));
	}
	INSTR_TIME_SET_CURRENT(start);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	rows = routed_execute(table, ROUTED_CLAIM_MANY, values,
						  PG_GETARG_TEXT_PP(2), 0, false);
	/* the claimed keys, sorted, in this function's memory */
	claimed = palloc((rows + 1) * sizeof(text *));
	for (uint64 i = 0; i < rows; i++)
	{
		bool		isnull;
		Datum		id = SPI_getbinval(SPI_tuptable->vals[i],
									   SPI_tuptable->tupdesc, 1, &isnull);

		claimed[i] = (text *) SPI_datumTransfer(id, false, -1);
	}
	SPI_finish();
	qsort(claimed, rows, sizeof(text *), text_compare);

	/* the first element of each claimed key is true; counted per element */
	{
		DedupClaimTally tally = {0};
		bool	   *taken = palloc0((rows + 1) * sizeof(bool));

		results = palloc(nkeys * sizeof(Datum));
		for (int i = 0; i < nkeys; i++)
		{
			text	   *key = DatumGetTextPP(elements[i]);
			text	  **hit = bsearch(&key, claimed, rows, sizeof(text *),
									  text_compare);
			bool		now = hit != NULL && !taken[hit - claimed];

			if (now)
				taken[hit - claimed] = true;
			results[i] = BoolGetDatum(now);
			dedup_stats_tally(&tally, now ? DEDUP_CLAIMED : DEDUP_DUPLICATE,
							  false, &start);
		}
		dedup_stats_flush(PG_GETARG_TEXT_PP(2), NULL, &tally);
	}
	if (ARR_NDIM(array) == 1)
		lbound = ARR_LBOUND(array)[0];
	PG_RETURN_ARRAYTYPE_P(construct_md_array(results, NULL, 1, &nkeys, &lbound,
											 BOOLOID, 1, true, TYPALIGN_CHAR));
}

/*
 * dedup_seen_routed(records regclass, route text, consumer text,
 * message_id text) RETURNS boolean
 *
 * dedup_seen for colocated records: is the claim recorded (and visible to
 * this transaction)?  Only reads.
 */
Datum
dedup_seen_routed(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(routed_one_key(fcinfo, ROUTED_SEEN, "dedup_seen_routed",
								  ROUTED_CLAIMANT));
}

/*
 * dedup_forget_routed(records regclass, route text, consumer text,
 * message_id text) RETURNS boolean
 *
 * dedup_forget for colocated records: delete consumer's record of
 * message_id from the shard of route, in the caller's transaction (and
 * with its privileges on the table), so that its next delivery is
 * processed again.  True if there was one.  Written to the server log, as
 * dedup_forget is.
 */
Datum
dedup_forget_routed(PG_FUNCTION_ARGS)
{
	bool		found = routed_one_key(fcinfo, ROUTED_FORGET,
									   "dedup_forget_routed", ROUTED_WRITES);

	dedup_audit_forget(PG_GETARG_TEXT_PP(2), PG_GETARG_TEXT_PP(3), found);
	PG_RETURN_BOOL(found);
}

/*
 * Register records, after checking that the caller owns it and that it
 * has exactly the shape of a records table (check_records_table()); false
 * when it was registered already.  The table stays locked against a
 * change of its shape, and another registration, until the transaction
 * ends: what was checked is what is registered.  The row is inserted as
 * the registry's owner, in a security-restricted operation: the caller
 * needs no privilege on the registry.  Its key is the arbiter (ON CONFLICT
 * (records) DO NOTHING): a registration that committed after this
 * transaction's snapshot is found there, and any other unique index or
 * exclusion constraint of the registry raises its own error.
 */
static bool
register_records(Oid records)
{
	Relation	rel = try_table_open(records, ShareUpdateExclusiveLock);
	const DedupRelations *rels;
	Relation	registry;
	Oid			argtypes[1] = {REGCLASSOID};
	Datum		values[1] = {ObjectIdGetDatum(records)};
	StringInfoData sql;
	Oid			owner;
	Oid			save_userid;
	int			save_sec_context;
	int			rc;
	bool		registered;

	if (rel == NULL)
		ereport(ERROR,
				errcode(ERRCODE_UNDEFINED_TABLE),
				errmsg("relation with OID %u does not exist", records));
	if (!dedup_class_ownercheck(records, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE,
					   RelationGetRelationName(rel));
	check_records_table(rel);
	table_close(rel, NoLock);

	registry = dedup_registry_open(&rels);
	if (dedup_registry_has(registry, records))
	{
		table_close(registry, AccessShareLock);
		return false;
	}
	owner = registry->rd_rel->relowner;
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s (records) VALUES ($1) ON CONFLICT (records) DO NOTHING",
					 quote_qualified_identifier(get_namespace_name(rels->schema),
												RelationGetRelationName(registry)));
	table_close(registry, AccessShareLock);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	rc = SPI_execute_with_args(sql.data, 1, argtypes, values, NULL, false, 0);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "registering failed: %s", SPI_result_code_string(rc));
	registered = (SPI_processed > 0);
	SPI_finish();
	pfree(sql.data);
	return registered;
}

/*
 * dedup_register_colocated_records(records regclass) RETURNS regclass
 *
 * Register records, a table the caller owns with exactly the shape that
 * dedup_create_colocated_records() gives (left by DROP EXTENSION, restored,
 * or made by hand), so that routed claims write to it, and the sweep and
 * the storage figures include it.  A table registered already is left as
 * it is, with a notice.
 */
Datum
dedup_register_colocated_records(PG_FUNCTION_ARGS)
{
	const char *call = "dedup_register_colocated_records()";
	Oid			records;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("argument \"records\" of dedup_register_colocated_records must not be null"));
	records = PG_GETARG_OID(0);
	PreventCommandDuringRecovery(call);
	PreventCommandIfReadOnly(call);
	dedup_colocated_check_node(call);
	if (!register_records(records))
		ereport(NOTICE,
				errcode(ERRCODE_DUPLICATE_OBJECT),
				errmsg("table \"%s\" is already registered as colocated records, skipping",
					   get_rel_name(records)));
	PG_RETURN_OID(records);
}

/*
 * dedup_create_colocated_records(records_table text, colocate_with
 * regclass) RETURNS regclass
 *
 * Create records_table (a name, qualified or not: then in the current
 * creation schema) as the caller, distribute it by its route column,
 * colocated with colocate_with (a hash-distributed table the caller owns),
 * and register it (register_records(), as dedup_register_colocated_records
 * does).  The route column has the type of colocate_with's distribution
 * column.
 */
Datum
dedup_create_colocated_records(PG_FUNCTION_ARGS)
{
	const char *call = "dedup_create_colocated_records()";
	Oid			colocate_with;
	RangeVar   *rv;
	Oid			namespace;
	Oid			records;
	AttrNumber	column;
	Oid			route_type;
	int32		route_typmod;
	Oid			route_collation;
	char	   *name;
	StringInfoData sql;
	Oid			argtypes[2] = {REGCLASSOID, TEXTOID};
	Datum		values[2];
	int			rc;

	for (int i = 0; i < 2; i++)
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					errmsg("argument \"%s\" of dedup_create_colocated_records must not be null",
						   i == 0 ? "records_table" : "colocate_with"));
	if (VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("argument \"records_table\" of dedup_create_colocated_records must not be empty"));
	colocate_with = PG_GETARG_OID(1);
	PreventCommandDuringRecovery(call);
	PreventCommandIfReadOnly(call);
	dedup_colocated_check_node(call);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(colocate_with)))
		ereport(ERROR,
				errcode(ERRCODE_UNDEFINED_TABLE),
				errmsg("relation with OID %u does not exist", colocate_with));
	if (!dedup_class_ownercheck(colocate_with, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE,
					   get_rel_name(colocate_with));

	/* colocate_with: hash-distributed, and its distribution column's type */
	column = dedup_citus_hash_column(colocate_with);
	if (column == InvalidAttrNumber)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("table \"%s\" is not a hash-distributed table",
					   get_rel_name(colocate_with)),
				errdetail("Colocated records are distributed by the business table's distribution column; a reference, local or append-distributed table has none."),
				errhint("Distribute it with create_distributed_table('%s', 'its_key') first.",
						get_rel_name(colocate_with)));
	get_atttypetypmodcoll(colocate_with, column, &route_type, &route_typmod,
						  &route_collation);

	rv = makeRangeVarFromNameList(textToQualifiedNameList(PG_GETARG_TEXT_PP(0)));
	namespace = RangeVarGetCreationNamespace(rv);
	name = quote_qualified_identifier(get_namespace_name(namespace), rv->relname);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE TABLE %s (route %s", name,
					 format_type_extended(route_type, route_typmod,
										  FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY));
	/* Citus colocates only distribution columns of one collation */
	if (OidIsValid(route_collation) &&
		route_collation != get_typcollation(route_type))
		appendStringInfo(&sql, " COLLATE %s",
						 generate_collation_name(route_collation));
	appendStringInfoString(&sql,
						   " NOT NULL, consumer pg_catalog.text NOT NULL, "
						   "message_id pg_catalog.text NOT NULL, "
						   "processed_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(), "
						   "PRIMARY KEY (route, consumer, message_id))");
	rc = SPI_execute(sql.data, false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "CREATE TABLE failed: %s", SPI_result_code_string(rc));
	records = RangeVarGetRelid(rv, NoLock, false);
	resetStringInfo(&sql);
	appendStringInfo(&sql, "CREATE INDEX ON %s (consumer, processed_at)", name);
	rc = SPI_execute(sql.data, false, 0);
	if (rc != SPI_OK_UTILITY)
		elog(ERROR, "CREATE INDEX failed: %s", SPI_result_code_string(rc));

	values[0] = ObjectIdGetDatum(records);
	values[1] = CStringGetTextDatum(quote_qualified_identifier(get_namespace_name(get_rel_namespace(colocate_with)),
															   get_rel_name(colocate_with)));
	rc = SPI_execute_with_args("SELECT pg_catalog.create_distributed_table($1, 'route'::pg_catalog.text, colocate_with => $2)",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "create_distributed_table failed: %s", SPI_result_code_string(rc));
	SPI_finish();

	register_records(records);
	PG_RETURN_OID(records);
}

/*
 * dedup_colocated_dropped() RETURNS event_trigger
 *
 * The extension's sql_drop event trigger: delete the registry rows of the
 * tables the command dropped, so that a table made later, which may be
 * given a dropped one's OID, is never taken for a registered one.  The
 * registry is found by name in the extension's schema and must be a member
 * of the extension (dedup_member_table()); nothing else of the extension is
 * looked at, so that no DROP fails here (on a Citus worker, or with a table
 * of the extension tampered with).  The rows are deleted as the registry's
 * owner, in a security-restricted operation: whoever drops a records table
 * needs no privilege on the registry.
 */
Datum
dedup_colocated_dropped(PG_FUNCTION_ARGS)
{
	Oid			registry = dedup_member_table("dedup_colocated_tables");
	StringInfoData sql;
	Oid			save_userid;
	int			save_sec_context;
	int			rc;

	if (!CALLED_AS_EVENT_TRIGGER(fcinfo))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("dedup_colocated_dropped() must be called as an event trigger"));
	if (!OidIsValid(registry))
		PG_RETURN_VOID();

	initStringInfo(&sql);
	appendStringInfo(&sql,
					 "DELETE FROM %s t WHERE t.records::pg_catalog.oid OPERATOR(pg_catalog.=) ANY "
					 "(SELECT d.objid FROM pg_catalog.pg_event_trigger_dropped_objects() d "
					 "WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass "
					 "AND d.objsubid OPERATOR(pg_catalog.=) 0)",
					 quote_qualified_identifier(get_namespace_name(get_rel_namespace(registry)),
												get_rel_name(registry)));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(dedup_table_owner(registry),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	rc = SPI_execute(sql.data, false, 0);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "unregistering dropped tables failed: %s",
			 SPI_result_code_string(rc));
	SPI_finish();
	PG_RETURN_VOID();
}
