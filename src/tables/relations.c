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
 * The claim, the sweep and the forgets write and read the tables directly:
 * no trigger, rule, CHECK constraint, row security policy, default or
 * partition bound of the table applies to them.  So each table is checked
 * to be as the extension created it, in every respect they would otherwise
 * silently skip (columns and their types, collations, NOT NULL and
 * defaults; logged; no inheritance; plain btree indexes of the default
 * operator classes), and refused with an error naming what to undo if not.
 * Dropped columns are skipped, and fingerprint is found by name: a column
 * dropped before 1.1 added it moves it past attribute number 4.
 *
 * What each table is checked for:
 *
 * - processed_messages and stream_positions, which dedup writes directly:
 *	 their columns (types, collations, NOT NULL, defaults; none added), no
 *	 trigger, rule, CHECK constraint or row security, and their key (and
 *	 processed_messages' time index) in the form the scans expect.
 * - dedup_retention, dedup_consumer_roles and dedup_colocated_tables (the
 *	 registry of colocated records tables, there without Citus too), which
 *	 SQL statements write (the SQL functions; register_records in
 *	 colocated.c), so that their triggers and constraints apply, and dedup
 *	 reads directly: their columns' types and collations, and their key.
 * - Every one: logged, and outside any inheritance tree.
 *
 * A unique index or exclusion constraint that a DBA adds is honoured as the
 * statement each write stands for honours it, never silently: every one is
 * an arbiter of a claim (INSERT ... ON CONFLICT DO NOTHING, claim_writer.c);
 * only the key is the arbiter of a claim by offset or a position set (ON
 * CONFLICT (consumer_name, stream, partition) DO UPDATE), of a window (ON
 * CONFLICT (consumer_name) DO UPDATE), of a claimant allowed (ON CONFLICT
 * (consumer_name, claimant) DO NOTHING) and of a registration (ON CONFLICT
 * (records) DO NOTHING), and any other raises its own error there: no write
 * to a row of another consumer, no silent "nothing to write".  So each key
 * is required, and nothing more.
 *
 * Every lookup first runs the guard that the module's _PG_init sets
 * (dedup_relations_guard): on a Citus cluster, citus.c refuses the layouts
 * where the tables read by OID are not the ones that count, before their
 * shape is checked, since Citus changes it too.  This file knows nothing of
 * Citus.
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
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_index.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "commands/defrem.h"
#include "nodes/primnodes.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/reltrigger.h"
#include "utils/syscache.h"

#include "tables/relations.h"

static DedupRelations cached;
static bool cached_valid = false;
static bool callback_registered = false;

/* run at every lookup, before the tables are checked (dedup_relations_guard) */
static DedupRelationsGuard relations_guard = NULL;

/*
 * The guard, which _PG_init sets on every load: a lookup without one fails
 * rather than go on unguarded.
 */
static void
run_guard(const DedupRelations *rels)
{
	if (relations_guard == NULL)
		elog(ERROR, "dedup: the table lookup has no guard set");
	relations_guard(rels);
}

static void
relations_invalidate(Datum arg, Oid relid)
{
	if (!cached_valid)
		return;
	if (relid == InvalidOid ||
		relid == cached.messages || relid == cached.retention ||
		relid == cached.consumer_roles || relid == cached.positions ||
		relid == cached.colocated)
		cached_valid = false;
}

/*
 * The error for a table of the extension that was changed in a way the
 * claim, the sweep or the maintenance functions would not honour: the
 * errdetail says what is wrong, the errhint what to undo.
 */
#define shape_error(rel, ...) \
	ereport(ERROR, \
			errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE), \
			errmsg("table \"%s\" of extension \"dedup\" is not as the extension created it", \
				   RelationGetRelationName(rel)), \
			__VA_ARGS__)

/* rel's name, schema-qualified and quoted, for hints */
static char *
qualified_name(Relation rel)
{
	return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
}

/*
 * The table rel inherits from, or is a partition of; InvalidOid if none.
 */
static Oid
inheritance_parent(Relation rel)
{
	Relation	inherits = table_open(InheritsRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			parent = InvalidOid;

	ScanKeyInit(&key, Anum_pg_inherits_inhrelid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(RelationGetRelid(rel)));
	scan = systable_beginscan(inherits, InheritsRelidSeqnoIndexId, true,
							  NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
		parent = ((Form_pg_inherits) GETSTRUCT(tuple))->inhparent;
	systable_endscan(scan);
	table_close(inherits, AccessShareLock);
	return parent;
}

/*
 * What every table of the extension must be: logged, and on its own.  An
 * unlogged table is emptied by a crash; rows of a table in an inheritance
 * tree are reached through other tables that dedup never looks at, and a
 * partition has bounds that dedup never checks.
 */
static void
check_table(Relation rel)
{
	Oid			parent;
	List	   *children;

	if (rel->rd_rel->relpersistence != RELPERSISTENCE_PERMANENT)
		shape_error(rel,
					errdetail("It is unlogged, so a crash would empty it."),
					errhint("Make it logged again with ALTER TABLE %s SET LOGGED.",
							qualified_name(rel)));
	parent = inheritance_parent(rel);
	if (OidIsValid(parent) && rel->rd_rel->relispartition)
		shape_error(rel,
					errdetail("It is a partition of table \"%s\", whose partition bounds dedup does not check.",
							  get_rel_name(parent)),
					errhint("Detach it with ALTER TABLE %s DETACH PARTITION %s.",
							quote_qualified_identifier(get_namespace_name(get_rel_namespace(parent)),
													   get_rel_name(parent)),
							qualified_name(rel)));
	if (OidIsValid(parent))
		shape_error(rel,
					errdetail("It inherits from table \"%s\", through which its rows can be read and changed with that table's privileges.",
							  get_rel_name(parent)),
					errhint("Remove the inheritance with ALTER TABLE %s NO INHERIT %s.",
							qualified_name(rel),
							quote_qualified_identifier(get_namespace_name(get_rel_namespace(parent)),
													   get_rel_name(parent))));
	children = find_inheritance_children(RelationGetRelid(rel), NoLock);
	if (children != NIL)
		shape_error(rel,
					errdetail("Table \"%s\" inherits from it: dedup never reads or deletes that table's rows, though queries of this table return them.",
							  get_rel_name(linitial_oid(children))),
					errhint("Remove the inheritance with ALTER TABLE %s NO INHERIT %s, or drop table \"%s\".",
							quote_qualified_identifier(get_namespace_name(get_rel_namespace(linitial_oid(children))),
													   get_rel_name(linitial_oid(children))),
							qualified_name(rel),
							get_rel_name(linitial_oid(children))));
}

/*
 * Check that column attnum of rel is called name, of type type, without a
 * type modifier, in the type's own collation (the database's default for
 * text): the claim and the sweep build and read tuples of exactly this shape
 * and compare values as the extension's indexes do.
 */
static void
check_column(Relation rel, AttrNumber attnum, const char *name, Oid type)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Form_pg_attribute att;

	if (attnum > desc->natts ||
		TupleDescAttr(desc, attnum - 1)->attisdropped ||
		strcmp(NameStr(TupleDescAttr(desc, attnum - 1)->attname), name) != 0)
		shape_error(rel,
					errdetail("Its column \"%s\" was dropped, renamed or moved.", name),
					errhint("Recreate the extension's objects: dump the table's rows, drop and create the extension again, and restore them."));
	att = TupleDescAttr(desc, attnum - 1);
	if (att->atttypid != type || att->atttypmod != -1)
		shape_error(rel,
					errdetail("Its column \"%s\" is no longer of type %s.",
							  name, format_type_be(type)),
					errhint("Change it back with ALTER TABLE %s ALTER COLUMN %s TYPE %s.",
							qualified_name(rel), quote_identifier(name),
							format_type_be(type)));
	if (att->attcollation != get_typcollation(type))
		shape_error(rel,
					errdetail("Its column \"%s\" no longer has the database's default collation, in which dedup compares its values.",
							  name),
					errhint("Change it back with ALTER TABLE %s ALTER COLUMN %s TYPE %s COLLATE \"default\".",
							qualified_name(rel), quote_identifier(name),
							format_type_be(type)));
}

/*
 * Check that column attnum of processed_messages, called name, is NOT NULL
 * or not, and has the default now() or none, as the extension created it:
 * a claim writes every column itself, so it would ignore any other default,
 * and it stores NULL in fingerprint when it has none.
 */
static void
check_column_fill(Relation rel, AttrNumber attnum, const char *name,
				  bool notnull, bool default_now)
{
	TupleDesc	desc = RelationGetDescr(rel);
	Form_pg_attribute att = TupleDescAttr(desc, attnum - 1);
	Node	   *expr = NULL;

	if (att->attnotnull && !notnull)
		shape_error(rel,
					errdetail("Its column \"%s\" was made NOT NULL, but claims without a fingerprint store NULL in it.",
							  name),
					errhint("Drop it with ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL.",
							qualified_name(rel), quote_identifier(name)));
	if (!att->attnotnull && notnull)
		shape_error(rel,
					errdetail("Its column \"%s\" is no longer NOT NULL.", name),
					errhint("Restore it with ALTER TABLE %s ALTER COLUMN %s SET NOT NULL.",
							qualified_name(rel), quote_identifier(name)));

	if (att->atthasdef)
	{
		for (int i = 0; i < desc->constr->num_defval; i++)
		{
			if (desc->constr->defval[i].adnum == attnum)
				expr = stringToNode(desc->constr->defval[i].adbin);
		}
	}
	if (expr != NULL && !default_now)
		shape_error(rel,
					errdetail("Its column \"%s\" has a default, which claims would not use: they write every column themselves.",
							  name),
					errhint("Drop it with ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT.",
							qualified_name(rel), quote_identifier(name)));
	if (default_now &&
		(expr == NULL || !IsA(expr, FuncExpr) ||
		 ((FuncExpr *) expr)->funcid != F_NOW ||
		 ((FuncExpr *) expr)->args != NIL))
		shape_error(rel,
					errdetail("Its column \"%s\" no longer defaults to now(), the time claims store in it.",
							  name),
					errhint("Restore the default with ALTER TABLE %s ALTER COLUMN %s SET DEFAULT pg_catalog.now().",
							qualified_name(rel), quote_identifier(name)));
}

/*
 * Is index a plain btree index of rel on exactly the columns attnums[0..
 * natts-1], in that order, ascending with nulls last, each with the default
 * btree operator class of its type and its own collation, without
 * expressions or predicate, valid and checked immediately, and unique if
 * the caller asks for it?  Only such an index orders and finds rows as the
 * scan keys of claims, forgets and sweeps (dedup_scan_key) expect.
 */
static bool
index_is_plain(Relation rel, Relation index, const AttrNumber *attnums,
			   int natts, bool unique)
{
	Form_pg_index form = index->rd_index;
	oidvector  *opclasses;
	bool		isnull;

	if (index->rd_rel->relam != BTREE_AM_OID ||
		form->indnkeyatts != natts ||
		(unique && !form->indisunique) ||
		!form->indisvalid || !form->indimmediate ||
		RelationGetIndexExpressions(index) != NIL ||
		RelationGetIndexPredicate(index) != NIL)
		return false;
	opclasses = (oidvector *) DatumGetPointer(SysCacheGetAttr(INDEXRELID,
															  index->rd_indextuple,
															  Anum_pg_index_indclass,
															  &isnull));
	for (int i = 0; i < natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel),
											  attnums[i] - 1);

		if (form->indkey.values[i] != attnums[i] ||
			opclasses->values[i] != GetDefaultOpClass(att->atttypid, BTREE_AM_OID) ||
			index->rd_indoption[i] != 0 ||
			index->rd_indcollation[i] != att->attcollation)
			return false;
	}
	return true;
}

/*
 * The OID of a plain index of rel (index_is_plain) on the columns
 * attnums[0..natts-1]; InvalidOid if there is none.
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
		bool		match = index_is_plain(rel, index, attnums, natts, unique);

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
 * Nothing on rel that the claims, forgets and sweeps, which write the table
 * directly, would not fire, apply or check: triggers (foreign keys among
 * them), rules, CHECK constraints, row security.
 */
static void
check_direct_writes(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	if (rel->trigdesc != NULL)
	{
		Trigger    *trigger = &rel->trigdesc->triggers[0];

		if (OidIsValid(trigger->tgconstraint))
			shape_error(rel,
						errdetail("Constraint \"%s\", a foreign key or constraint trigger, has triggers on it that claims, forgets and sweeps would not fire.",
								  get_constraint_name(trigger->tgconstraint)),
						errhint("Drop constraint \"%s\" from the table that has it.",
								get_constraint_name(trigger->tgconstraint)));
		shape_error(rel,
					errdetail("It has trigger \"%s\", which claims, forgets and sweeps would not fire.",
							  trigger->tgname),
					errhint("Drop it with DROP TRIGGER %s ON %s.",
							quote_identifier(trigger->tgname),
							qualified_name(rel)));
	}
	if (rel->rd_rules != NULL)
		shape_error(rel,
					errdetail("It has a rule, which claims, forgets and sweeps would not apply."),
					errhint("Drop each of its rules with DROP RULE ... ON %s.",
							qualified_name(rel)));
	if (desc->constr != NULL && desc->constr->num_check > 0)
		shape_error(rel,
					errdetail("It has CHECK constraint \"%s\", which claims would not check.",
							  desc->constr->check[0].ccname),
					errhint("Drop it with ALTER TABLE %s DROP CONSTRAINT %s.",
							qualified_name(rel),
							quote_identifier(desc->constr->check[0].ccname)));
	if (rel->rd_rel->relrowsecurity)
		shape_error(rel,
					errdetail("Row security is enabled on it, and claims, forgets and sweeps would not apply its policies."),
					errhint("Disable it with ALTER TABLE %s DISABLE ROW LEVEL SECURITY.",
							qualified_name(rel)));
}

/*
 * processed_messages: the extension's columns and nothing else besides
 * dropped ones, and nothing that a claim, a forget or a sweep, which write
 * the table directly, would not fire, check or apply.  Returns the attribute
 * number of fingerprint, 0 if there is none (version 1.0 of the SQL
 * objects, before_fingerprint): 4, or later if a column was dropped before
 * 1.1 added it.
 */
static AttrNumber
check_messages(Relation rel, bool before_fingerprint)
{
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	fingerprint = 0;

	check_table(rel);
	check_column(rel, 1, "consumer_name", TEXTOID);
	check_column(rel, 2, "message_id", TEXTOID);
	check_column(rel, 3, "processed_at", TIMESTAMPTZOID);
	for (AttrNumber attnum = 4; attnum <= desc->natts; attnum++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attnum - 1);

		if (att->attisdropped)
			continue;
		if (fingerprint != 0 || before_fingerprint ||
			strcmp(NameStr(att->attname), "fingerprint") != 0)
			shape_error(rel,
						errdetail("It has a column \"%s\" that the extension did not create, which claims would leave empty.",
								  NameStr(att->attname)),
						errhint("Drop it with ALTER TABLE %s DROP COLUMN %s.",
								qualified_name(rel),
								quote_identifier(NameStr(att->attname))));
		check_column(rel, attnum, "fingerprint", BYTEAOID);
		fingerprint = attnum;
	}
	if (fingerprint == 0 && !before_fingerprint)
		shape_error(rel,
					errdetail("Its column \"fingerprint\" was dropped."),
					errhint("Add it back with ALTER TABLE %s ADD COLUMN fingerprint bytea.",
							qualified_name(rel)));
	check_column_fill(rel, 1, "consumer_name", true, false);
	check_column_fill(rel, 2, "message_id", true, false);
	check_column_fill(rel, 3, "processed_at", true, true);
	if (fingerprint != 0)
		check_column_fill(rel, fingerprint, "fingerprint", false, false);

	check_direct_writes(rel);
	return fingerprint;
}

/*
 * stream_positions: the extension's columns, each NOT NULL and without a
 * default (claims by offset write every column themselves), nothing else
 * besides dropped ones, nothing that those claims would skip, and its key.
 * Returns the key's OID.
 */
static Oid
check_positions(Relation rel)
{
	static const AttrNumber key_columns[] = {1, 2, 3};
	Oid			key;
	static const struct
	{
		const char *name;
		Oid			type;
	}			columns[] =
	{
		{"consumer_name", TEXTOID},
		{"stream", TEXTOID},
		{"partition", INT4OID},
		{"committed_offset", INT8OID},
		{"updated_at", TIMESTAMPTZOID},
	};
	TupleDesc	desc = RelationGetDescr(rel);

	check_table(rel);
	for (int i = 0; i < lengthof(columns); i++)
	{
		check_column(rel, i + 1, columns[i].name, columns[i].type);
		check_column_fill(rel, i + 1, columns[i].name, true, false);
	}
	for (AttrNumber attnum = lengthof(columns) + 1; attnum <= desc->natts; attnum++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attnum - 1);

		if (!att->attisdropped)
			shape_error(rel,
						errdetail("It has a column \"%s\" that the extension did not create, which claims would leave empty.",
								  NameStr(att->attname)),
						errhint("Drop it with ALTER TABLE %s DROP COLUMN %s.",
								qualified_name(rel),
								quote_identifier(NameStr(att->attname))));
	}
	check_direct_writes(rel);

	key = find_index(rel, key_columns, lengthof(key_columns), true);
	if (OidIsValid(key))
		return key;
	shape_error(rel,
				errdetail("It has no index that claims by offset can use to find a position: a valid unique btree index on (consumer_name, stream, partition), ascending, with the default operator classes and collations, without expressions or predicate, and not deferrable."),
				errhint("Restore its primary key with ALTER TABLE %s ADD CONSTRAINT stream_positions_pkey PRIMARY KEY (consumer_name, stream, \"partition\").",
						qualified_name(rel)));
	return InvalidOid;			/* keep compiler quiet */
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

/*
 * The extension's table called name, found as relations_load() finds it but
 * without looking at anything else (InvalidOid when dedup or the table is
 * not there): for code that must not fail where dedup_relations() would,
 * such as the event trigger that every DROP runs (colocated.c).
 */
Oid
dedup_member_table(const char *name)
{
	Oid			schema = InvalidOid;
	Oid			extension = extension_lookup(&schema);

	if (!OidIsValid(extension))
		return InvalidOid;
	return member_table(extension, schema, name);
}

/* What relations_load found */
typedef enum RelationsLoad
{
	RELATIONS_LOADED,
	RELATIONS_NO_EXTENSION,
	RELATIONS_GONE				/* dropped while we looked, or waited for a
								 * lock */
} RelationsLoad;

static RelationsLoad
relations_load(DedupRelations *rels)
{
	static const AttrNumber messages_key[] = {1, 2};
	static const AttrNumber messages_time[] = {1, 3};
	static const AttrNumber consumer_key[] = {1};
	static const AttrNumber roles_key[] = {1, 2};
	static const AttrNumber registry_key[] = {1};
	Relation	rel;

	memset(rels, 0, sizeof(DedupRelations));
	rels->extension = extension_lookup(&rels->schema);
	if (!OidIsValid(rels->extension))
		return RELATIONS_NO_EXTENSION;

	rels->messages = member_table(rels->extension, rels->schema,
								  "processed_messages");
	rels->retention = member_table(rels->extension, rels->schema,
								   "dedup_retention");
	if (!OidIsValid(rels->messages) || !OidIsValid(rels->retention))
	{
		Oid			schema;

		/*
		 * A DROP EXTENSION that committed since the extension was found (the
		 * lookups above may have taken its invalidations) is not a missing
		 * table: look again
		 */
		if (extension_lookup(&schema) != rels->extension)
			return RELATIONS_GONE;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s\" of extension \"dedup\" is missing",
						OidIsValid(rels->messages) ? "dedup_retention" : "processed_messages"),
				 errdetail("It is not in the extension's schema, or it is no longer a member of the extension."),
				 errhint("Restore it, or drop and create the extension again.")));
	}
	/* dedup_consumer_roles exists from version 1.1 on, as fingerprint */
	rels->consumer_roles = member_table(rels->extension, rels->schema,
										"dedup_consumer_roles");
	/* and stream_positions from 1.2 on */
	rels->positions = member_table(rels->extension, rels->schema,
								   "stream_positions");
	/* and the registry of colocated records tables too (colocated.c) */
	rels->colocated = member_table(rels->extension, rels->schema,
								   "dedup_colocated_tables");
	/* before the checks of the tables' shape, which Citus also changes */
	run_guard(rels);

	/*
	 * Each table is locked before it is looked at.  DROP EXTENSION may hold
	 * it: once it commits, the table is gone, and the caller looks again.
	 */
	if ((rel = try_table_open(rels->messages, AccessShareLock)) == NULL)
		return RELATIONS_GONE;
	rels->fingerprint_attnum = check_messages(rel,
											  !OidIsValid(rels->consumer_roles));
	rels->messages_key = find_index(rel, messages_key, 2, true);
	if (!OidIsValid(rels->messages_key))
		shape_error(rel,
					errdetail("It has no index that claims can use as its key: a valid unique btree index on (consumer_name, message_id), ascending, with the default operator classes and collations, without expressions or predicate, and not deferrable."),
					errhint("Restore its primary key with ALTER TABLE %s ADD CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer_name, message_id).",
							qualified_name(rel)));
	rels->messages_time = find_index(rel, messages_time, 2, false);
	if (!OidIsValid(rels->messages_time))
		shape_error(rel,
					errdetail("It has no index that sweeps can use to find expired rows: a valid btree index on (consumer_name, processed_at), ascending, with the default operator classes and collations, without expressions or predicate."),
					errhint("Restore it with CREATE INDEX processed_messages_consumer_time_idx ON %s (consumer_name, processed_at).",
							qualified_name(rel)));
	table_close(rel, AccessShareLock);

	if ((rel = try_table_open(rels->retention, AccessShareLock)) == NULL)
		return RELATIONS_GONE;
	check_table(rel);
	check_column(rel, 1, "consumer_name", TEXTOID);
	check_column(rel, 2, "retention", INTERVALOID);
	rels->retention_key = find_index(rel, consumer_key, 1, true);
	if (!OidIsValid(rels->retention_key))
		shape_error(rel,
					errdetail("It has no index that sweeps can use to find a consumer's window: a valid unique btree index on (consumer_name), ascending, with the default operator class and collation, without expression or predicate, and not deferrable."),
					errhint("Restore its primary key with ALTER TABLE %s ADD CONSTRAINT dedup_retention_pkey PRIMARY KEY (consumer_name).",
							qualified_name(rel)));
	table_close(rel, AccessShareLock);

	if (OidIsValid(rels->consumer_roles))
	{
		if ((rel = try_table_open(rels->consumer_roles, AccessShareLock)) == NULL)
			return RELATIONS_GONE;
		check_table(rel);
		check_column(rel, 1, "consumer_name", TEXTOID);
		check_column(rel, 2, "claimant", REGROLEOID);
		rels->consumer_roles_key = find_index(rel, roles_key, 2, true);
		if (!OidIsValid(rels->consumer_roles_key))
			shape_error(rel,
						errdetail("It has no index that claims can use to find a consumer's roles: a valid unique btree index on (consumer_name, claimant), ascending, with the default operator classes and collations, without expressions or predicate, and not deferrable."),
						errhint("Restore its primary key with ALTER TABLE %s ADD CONSTRAINT dedup_consumer_roles_pkey PRIMARY KEY (consumer_name, claimant).",
								qualified_name(rel)));
		table_close(rel, AccessShareLock);
	}

	if (OidIsValid(rels->positions))
	{
		if ((rel = try_table_open(rels->positions, AccessShareLock)) == NULL)
			return RELATIONS_GONE;
		rels->positions_key = check_positions(rel);
		table_close(rel, AccessShareLock);
	}

	if (OidIsValid(rels->colocated))
	{
		if ((rel = try_table_open(rels->colocated, AccessShareLock)) == NULL)
			return RELATIONS_GONE;
		check_table(rel);
		check_column(rel, 1, "records", REGCLASSOID);
		check_column(rel, 2, "registered_at", TIMESTAMPTZOID);
		if (!OidIsValid(find_index(rel, registry_key, 1, true)))
			shape_error(rel,
						errdetail("It has no index that keeps each records table registered once: a valid unique btree index on (records), ascending, with the default operator class, without expression or predicate, and not deferrable."),
						errhint("Restore its primary key with ALTER TABLE %s ADD CONSTRAINT dedup_colocated_tables_pkey PRIMARY KEY (records).",
								qualified_name(rel)));
		table_close(rel, AccessShareLock);
	}
	return RELATIONS_LOADED;
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
		RelationsLoad found = relations_load(&rels);

		/* a table dropped under us: the lock wait has told us what changed */
		if (found == RELATIONS_GONE)
			found = relations_load(&rels);
		if (found == RELATIONS_GONE)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("extension \"dedup\" was dropped or altered concurrently")));
		if (found == RELATIONS_NO_EXTENSION)
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
	run_guard(&cached);
	return &cached;
}

/*
 * Set the guard that every lookup of the tables runs, with the tables found
 * but not yet opened or checked: the refusals of a layout in which reading
 * and writing them by OID would be silently wrong, and what the transaction
 * must do to commit (the Citus guard, dedup_citus_check).  The module's
 * _PG_init sets it, before any lookup.
 */
void
dedup_relations_guard(DedupRelationsGuard guard)
{
	relations_guard = guard;
}

/* the owner of the table relid */
Oid
dedup_table_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
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
		case DEDUP_STREAM_POSITIONS:
			return rels->positions;
	}
	return InvalidOid;
}

/*
 * Open one of the extension's tables, by OID, with lockmode.  Taking the lock
 * accepts invalidations: any of them (a GRANT, a VACUUM's new statistics, a
 * cache reset on a busy server) makes the lookup stale, but only a lookup
 * made while the table is locked can say whether the table is still the
 * extension's.  If it is not (the extension was dropped, and perhaps created
 * again), open the table the new lookup names, once.  *rels is set to the
 * lookup that was used.  Returns NULL when the table does not exist
 * (dedup_consumer_roles before 1.1, stream_positions before 1.2), or dedup is
 * not installed and missing_ok.
 */
Relation
dedup_table_open(DedupTable table, LOCKMODE lockmode, bool missing_ok,
				 const DedupRelations **rels)
{
	for (int attempt = 0; attempt < 2; attempt++)
	{
		Oid			relid;
		Relation	rel;

		*rels = dedup_relations(missing_ok);
		if (*rels == NULL || !OidIsValid(relid = table_oid(*rels, table)))
			return NULL;
		rel = try_table_open(relid, lockmode);
		if (rel == NULL)
		{
			cached_valid = false;
			continue;
		}
		if (cached_valid)
			return rel;
		/* with the table locked, it cannot stop being the extension's */
		*rels = dedup_relations(missing_ok);
		if (*rels != NULL && table_oid(*rels, table) == relid)
			return rel;
		table_close(rel, lockmode);
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("extension \"dedup\" was dropped or altered concurrently")));
	return NULL;				/* keep compiler quiet */
}

/*
 * Set up *key to compare key column attno of index (one of the extension's
 * btree indexes, on text and timestamptz columns) with value by strategy,
 * in the column's collation, as the index orders it (the int4 columns
 * have none).
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
		{INT4OID, BTEqualStrategyNumber, F_INT4EQ},
		{TIMESTAMPTZOID, BTLessStrategyNumber, F_TIMESTAMPTZ_LT},
		{TIMESTAMPTZOID, BTGreaterEqualStrategyNumber, F_TIMESTAMPTZ_GE},
		{TIMESTAMPTZOID, BTGreaterStrategyNumber, F_TIMESTAMPTZ_GT},
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
