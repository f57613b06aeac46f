/*-------------------------------------------------------------------------
 *
 * relations.c
 *	  Finding the extension's own tables and indexes, by OID.
 *
 * The claim, the sweep and the maintenance functions never resolve one of
 * dedup's objects by name while they run: a schema renamed and replaced by
 * a look-alike, or a table planted on someone's search_path, must never
 * receive a claim or run code.  So the tables are found once per backend
 * through the extension itself: its pg_extension row gives the schema, each
 * table found there must be a member of the extension (pg_depend), and its
 * indexes are recognised by their key columns, not their names.  From then
 * on everything is opened by OID.
 *
 * The OIDs are cached per backend and forgotten on any relcache
 * invalidation of one of the tables (DROP EXTENSION, ALTER EXTENSION
 * UPDATE, ALTER TABLE), and looked up again at next use.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "dedup.h"

static DedupRelations cached;
static bool cached_valid = false;
static bool callback_registered = false;

static void
relations_invalidate(Datum arg, Oid relid)
{
	if (!cached_valid)
		return;
	if (relid == InvalidOid ||
		relid == cached.messages || relid == cached.retention ||
		relid == cached.consumer_roles)
		cached_valid = false;
}

/*
 * The OID of the index of table rel whose key columns are exactly the
 * attribute numbers attnums[0..natts-1], in that order, and that is unique
 * if the caller asks for it; InvalidOid if there is none.
 */
static Oid
find_index(Relation rel, const AttrNumber *attnums, int natts, bool unique)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		bool		match = (form->indnkeyatts == natts &&
							 (!unique || form->indisunique) &&
							 form->indisvalid && form->indimmediate &&
							 RelationGetIndexExpressions(index) == NIL &&
							 RelationGetIndexPredicate(index) == NIL);

		for (int i = 0; match && i < natts; i++)
			match = (form->indkey.values[i] == attnums[i]);
		index_close(index, AccessShareLock);
		if (match)
		{
			found = lfirst_oid(lc);
			break;
		}
	}
	list_free(indexes);
	return found;
}

/*
 * Is column attnum of rel called name and of type typid?  The claim and the
 * sweep build and read tuples of exactly this shape.
 */
static bool
column_is(Relation rel, AttrNumber attnum, const char *name, Oid typid)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Form_pg_attribute att;

	if (attnum > desc->natts)
		return false;
	att = TupleDescAttr(desc, attnum - 1);
	return !att->attisdropped && att->atttypid == typid &&
		strcmp(NameStr(att->attname), name) == 0;
}

static void
shape_error(Oid relid)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("table \"%s\" of extension \"dedup\" is not as the extension created it",
					get_rel_name(relid)),
			 errdetail("dedup reads and writes it directly, by its columns and indexes: it fires no trigger or rule, checks no CHECK constraint and applies no row security policy."),
			 errhint("Remove the triggers, rules, CHECK constraints, row security or columns that were added, or restore the indexes it was created with.")));
}

/*
 * The table called name in the extension's schema, if it is a member of
 * the extension (extension_oid); InvalidOid otherwise.
 */
static Oid
member_table(Oid extension_oid, Oid schema, const char *name)
{
	Oid			relid = get_relname_relid(name, schema);

	if (!OidIsValid(relid) ||
		get_rel_relkind(relid) != RELKIND_RELATION ||
		getExtensionOfObject(RelationRelationId, relid) != extension_oid)
		return InvalidOid;
	return relid;
}

/*
 * The pg_extension row of dedup, found by name (extension names are not
 * schema-qualified and cannot be spoofed): its OID, and its schema in
 * *schema.  InvalidOid when dedup is not installed.
 */
static Oid
extension_lookup(Oid *schema)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			extension = InvalidOid;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("dedup"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		Form_pg_extension form = (Form_pg_extension) GETSTRUCT(tuple);

		extension = form->oid;
		*schema = form->extnamespace;
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return extension;
}

static bool
relations_load(DedupRelations *rels)
{
	static const AttrNumber messages_key[] = {1, 2};
	static const AttrNumber messages_time[] = {1, 3};
	static const AttrNumber consumer_key[] = {1};
	static const AttrNumber roles_key[] = {1, 2};
	Relation	rel;

	memset(rels, 0, sizeof(DedupRelations));
	rels->extension = extension_lookup(&rels->schema);
	if (!OidIsValid(rels->extension))
		return false;

	rels->messages = member_table(rels->extension, rels->schema,
								  "processed_messages");
	rels->retention = member_table(rels->extension, rels->schema,
								   "dedup_retention");
	if (!OidIsValid(rels->messages) || !OidIsValid(rels->retention))
		shape_error(OidIsValid(rels->messages) ? rels->messages : rels->retention);
	/* dedup_consumer_roles exists from version 1.1 on */
	rels->consumer_roles = member_table(rels->extension, rels->schema,
										"dedup_consumer_roles");

	rel = table_open(rels->messages, AccessShareLock);
	/* 1.1 added a fourth column, fingerprint */
	if (RelationGetDescr(rel)->natts < 3 || RelationGetDescr(rel)->natts > 4 ||
		(RelationGetDescr(rel)->natts == 4 &&
		 !column_is(rel, 4, "fingerprint", BYTEAOID)) ||
		!column_is(rel, 1, "consumer_name", TEXTOID) ||
		!column_is(rel, 2, "message_id", TEXTOID) ||
		!column_is(rel, 3, "processed_at", TIMESTAMPTZOID) ||
		rel->trigdesc != NULL || rel->rd_rules != NULL ||
		(RelationGetDescr(rel)->constr != NULL &&
		 RelationGetDescr(rel)->constr->num_check > 0) ||
		rel->rd_rel->relrowsecurity)
		shape_error(rels->messages);
	rels->messages_key = find_index(rel, messages_key, 2, true);
	rels->messages_time = find_index(rel, messages_time, 2, false);
	table_close(rel, AccessShareLock);
	if (!OidIsValid(rels->messages_key) || !OidIsValid(rels->messages_time))
		shape_error(rels->messages);

	rel = table_open(rels->retention, AccessShareLock);
	if (!column_is(rel, 1, "consumer_name", TEXTOID) ||
		!column_is(rel, 2, "retention", INTERVALOID))
		shape_error(rels->retention);
	rels->retention_key = find_index(rel, consumer_key, 1, true);
	table_close(rel, AccessShareLock);
	if (!OidIsValid(rels->retention_key))
		shape_error(rels->retention);

	if (OidIsValid(rels->consumer_roles))
	{
		rel = table_open(rels->consumer_roles, AccessShareLock);
		if (!column_is(rel, 1, "consumer_name", TEXTOID) ||
			!column_is(rel, 2, "claimant", REGROLEOID))
			shape_error(rels->consumer_roles);
		rels->consumer_roles_key = find_index(rel, roles_key, 2, true);
		table_close(rel, AccessShareLock);
		if (!OidIsValid(rels->consumer_roles_key))
			shape_error(rels->consumer_roles);
	}
	return true;
}

/*
 * The extension's tables and indexes in the current database, or NULL when
 * dedup is not installed here and missing_ok (an error otherwise).  The
 * result is valid until the next invalidation: callers open what they need
 * by OID right away, with try_table_open, and call dedup_relations again
 * if a table has gone.
 */
const DedupRelations *
dedup_relations(bool missing_ok)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(relations_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (!cached_valid)
	{
		DedupRelations rels;

		if (!relations_load(&rels))
		{
			if (missing_ok)
				return NULL;
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("extension \"dedup\" is not installed in this database"),
					 errhint("Run CREATE EXTENSION dedup.")));
		}
		cached = rels;
		cached_valid = true;
	}
	return &cached;
}

static Oid
table_oid(const DedupRelations *rels, DedupTable table)
{
	switch (table)
	{
		case DEDUP_MESSAGES:
			return rels->messages;
		case DEDUP_RETENTION:
			return rels->retention;
		case DEDUP_CONSUMER_ROLES:
			return rels->consumer_roles;
	}
	return InvalidOid;
}

/*
 * Open one of the extension's tables, by OID, with lockmode.  If it has gone
 * since dedup_relations() was last called (the extension was dropped, and
 * perhaps created again, and taking the lock has just told us), look the
 * tables up again, once.  *rels is set to the lookup that was used.  Returns
 * NULL when the table does not exist (dedup_consumer_roles before 1.1), or
 * dedup is not installed and missing_ok.
 */
Relation
dedup_table_open(DedupTable table, LOCKMODE lockmode, bool missing_ok,
				 const DedupRelations **rels)
{
	for (int attempt = 0; attempt < 2; attempt++)
	{
		Relation	rel;

		*rels = dedup_relations(missing_ok);
		if (*rels == NULL || !OidIsValid(table_oid(*rels, table)))
			return NULL;
		rel = try_table_open(table_oid(*rels, table), lockmode);
		if (rel != NULL && cached_valid)
			return rel;
		if (rel != NULL)
			table_close(rel, lockmode);
		cached_valid = false;
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("extension \"dedup\" was dropped or altered concurrently")));
	return NULL;				/* keep compiler quiet */
}

/*
 * Set up *key to compare key column attno of index (one of the extension's
 * btree indexes, on text and timestamptz columns) with value by strategy,
 * in the column's collation, as the index orders it.
 */
void
dedup_scan_key(ScanKey key, Relation index, AttrNumber attno,
			   StrategyNumber strategy, Datum value)
{
	static const struct
	{
		Oid			type;
		StrategyNumber strategy;
		RegProcedure proc;
	}			procs[] =
	{
		{TEXTOID, BTEqualStrategyNumber, F_TEXTEQ},
		{TEXTOID, BTGreaterStrategyNumber, F_TEXT_GT},
		{TIMESTAMPTZOID, BTLessStrategyNumber, F_TIMESTAMPTZ_LT},
		{TIMESTAMPTZOID, BTGreaterEqualStrategyNumber, F_TIMESTAMPTZ_GE},
	};
	Oid			type = TupleDescAttr(RelationGetDescr(index), attno - 1)->atttypid;

	for (int i = 0; i < lengthof(procs); i++)
	{
		if (procs[i].type == type && procs[i].strategy == strategy)
		{
			ScanKeyEntryInitialize(key, 0, attno, strategy, type,
								   index->rd_indcollation[attno - 1],
								   procs[i].proc, value);
			return;
		}
	}
	elog(ERROR, "no scan key procedure for type %u and strategy %d",
		 type, strategy);
}
