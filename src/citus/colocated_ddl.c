/*-------------------------------------------------------------------------
 *
 * colocated_ddl.c
 *	  Making, registering and unregistering colocated records tables:
 *	  dedup_create_colocated_records() creates one as the caller and
 *	  distributes it with the business table, dedup_register_colocated_records()
 *	  registers one made otherwise (by hand, or left by DROP EXTENSION),
 *	  and the extension's sql_drop event trigger (dedup_colocated_dropped)
 *	  removes a dropped one from the registry, so that a table given its OID
 *	  later is not taken for it.
 *
 * The registry's rows are written as its owner, in a security-restricted
 * operation: the caller needs no privilege on the registry, only ownership
 * of the table it registers.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/event_trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

#include "citus/citus.h"
#include "compat.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_create_colocated_records);
PG_FUNCTION_INFO_V1(dedup_register_colocated_records);
PG_FUNCTION_INFO_V1(dedup_colocated_dropped);

/*
 * Register records, after checking that the caller owns it and that it
 * has exactly the shape of a records table (dedup_check_records_table());
 * false when it was registered already.  The table stays locked against a
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
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", records)));
	if (!dedup_class_ownercheck(records, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE,
					   RelationGetRelationName(rel));
	dedup_check_records_table(rel);
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
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"records\" of dedup_register_colocated_records must not be null")));
	records = PG_GETARG_OID(0);
	PreventCommandDuringRecovery(call);
	PreventCommandIfReadOnly(call);
	dedup_colocated_check_node(call);
	if (!register_records(records))
		ereport(NOTICE,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("table \"%s\" is already registered as colocated records, skipping",
						get_rel_name(records))));
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
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" of dedup_create_colocated_records must not be null",
							i == 0 ? "records_table" : "colocate_with")));
	if (VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"records_table\" of dedup_create_colocated_records must not be empty")));
	colocate_with = PG_GETARG_OID(1);
	PreventCommandDuringRecovery(call);
	PreventCommandIfReadOnly(call);
	dedup_colocated_check_node(call);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(colocate_with)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", colocate_with)));
	if (!dedup_class_ownercheck(colocate_with, GetUserId()))
		aclcheck_error(ACLCHECK_NOT_OWNER, OBJECT_TABLE,
					   get_rel_name(colocate_with));

	/* colocate_with: hash-distributed, and its distribution column's type */
	column = dedup_citus_hash_column(colocate_with);
	if (column == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("table \"%s\" is not a hash-distributed table",
						get_rel_name(colocate_with)),
				 errdetail("Colocated records are distributed by the business table's distribution column; a reference, local or append-distributed table has none."),
				 errhint("Distribute it with create_distributed_table('%s', 'its_key') first.",
						 get_rel_name(colocate_with))));
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
				(errcode(ERRCODE_E_R_I_E_EVENT_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("dedup_colocated_dropped() must be called as an event trigger")));
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
