/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The registry of colocated records tables (dedup_colocated_tables) and
 *	  the shape every records table must keep: what a routed claim, the
 *	  colocated sweep and the storage figures check before they use one,
 *	  and where colocated records may be used at all (the Citus
 *	  coordinator).
 *
 * A records table carries no code of its owner's that a claim or the sweep
 * would run (no trigger but TRUNCATE ones, no rule, no row security), has
 * exactly the columns and keys that dedup_create_colocated_records() gives
 * it, and is hash-distributed by its route column: refused otherwise, at
 * registration (colocated_ddl.c), and at every claim (routed_plan.c), sweep
 * and count (colocated_sweep.c) after a change.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "nodes/primnodes.h"
#include "rewrite/rewriteHandler.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "citus/citus.h"
#include "tables/relations.h"

/* the columns of a records table, in this order */
#define ROUTE_ATTNUM 1
#define CONSUMER_ATTNUM 2
#define MESSAGE_ID_ATTNUM 3
#define PROCESSED_AT_ATTNUM 4
#define RECORDS_NATTS 4

/* Refuse colocated records where Citus is not, or on a worker. */
void
dedup_colocated_check_node(const char *function)
{
	int32		group = dedup_citus_group();

	if (group < 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s needs Citus", function),
				 errdetail("Colocated records are distributed tables of a Citus cluster; the citus extension is not installed in this database."),
				 errhint("Without Citus, keep the records in processed_messages: claim with dedup_claim(), look with dedup_seen(), forget with dedup_forget().")));
	if (group != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s must be called on the Citus coordinator", function),
				 errdetail("This node is in Citus group %d; colocated records are reached through the coordinator's distributed planner.",
						   group),
				 errhint("Call it on the coordinator, in the transaction that updates the business rows.")));
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
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"dedup\" has no colocated records before version 1.2"),
				 errhint("Run ALTER EXTENSION dedup UPDATE.")));
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
			(errcode(ERRCODE_WRONG_OBJECT_TYPE),
			 errmsg("table \"%s\" is not usable as colocated records", RelationGetRelationName(rel)),
			 errdetail("%s", what),
			 errhint("Records tables are made by dedup_create_colocated_records(); one made otherwise must have exactly that shape, and none may be altered.")));
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
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("table \"%s\" is not usable as colocated records",
							RelationGetRelationName(rel)),
					 errdetail("It has the unique index or exclusion constraint \"%s\" besides its primary key: a claim of one key would be a duplicate of another.",
							   RelationGetRelationName(index)),
					 errhint("Drop it: the primary key (route, consumer, message_id) is the only key of a records table.")));
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
						(errcode(ERRCODE_WRONG_OBJECT_TYPE),
						 errmsg("table \"%s\" is not usable as colocated records",
								RelationGetRelationName(rel)),
						 errdetail("It has trigger \"%s\", whose code the sweep and the claims would run.",
								   trigger->tgname),
						 errhint("Drop it (a foreign key referencing the table has triggers on it too); records tables carry no triggers, rules or row security.")));
		}
	}
	if (rel->rd_rules != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table \"%s\" is not usable as colocated records",
						RelationGetRelationName(rel)),
				 errdetail("It has a rule, which would rewrite the sweep's and the claims' statements."),
				 errhint("Drop each of its rules with DROP RULE; records tables carry no triggers, rules or row security.")));
	if (rel->rd_rel->relrowsecurity || rel->rd_rel->relforcerowsecurity)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table \"%s\" is not usable as colocated records",
						RelationGetRelationName(rel)),
				 errdetail("Row security is enabled on it: its policies would decide which rows the sweep and the claims see, and run their functions."),
				 errhint("Run ALTER TABLE ... DISABLE ROW LEVEL SECURITY and NO FORCE ROW LEVEL SECURITY on it.")));
}

/*
 * Check that rel has exactly the shape of the records tables
 * dedup_create_colocated_records() makes, and that it is hash-distributed
 * by its route column: what a claim, its answer, the sweep and the commit
 * on the worker rely on.  Returns the type of the route column.
 */
Oid
dedup_check_records_table(Relation rel)
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
 * refusal of dedup_check_records_table().  The table stays locked in lockmode
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

	dedup_check_records_table(rel);
	name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
	table_close(rel, NoLock);
	return name;
}
