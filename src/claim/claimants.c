/*-------------------------------------------------------------------------
 *
 * claimants.c
 *	  Who may claim for a consumer, or look at its records: the consumer ->
 *	  role mapping of dedup_consumer_roles, with a per-backend cache of
 *	  whether the table maps any consumer at all, and the trigger that
 *	  keeps every backend's cache current.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "commands/trigger.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "claim/claim.h"
#include "compat.h"
#include "guc.h"
#include "tables/relations.h"

PG_FUNCTION_INFO_V1(dedup_consumer_roles_changed);

/*
 * Whether dedup_consumer_roles (OID claimant_map_relid) has any row, as this
 * backend last saw it.  Every change of the table invalidates its relcache
 * entry (dedup_consumer_roles_changed, a row trigger that fires in every
 * session_replication_role, logical replication's apply included, and a
 * TRUNCATE trigger), which every backend processes at its next transaction
 * start at the latest and which resets this.  The table is read with a
 * snapshot taken after its lock, so after any invalidation that lock
 * acquisition processed: a change that this snapshot cannot see has not
 * sent its invalidation yet, and will reset the answer when it does.  Claims
 * in a database that maps no consumer pay one test for the check, and a
 * change applies to transactions that start after it commits.
 */
typedef enum ClaimantMapState
{
	CLAIMANT_MAP_UNKNOWN,
	CLAIMANT_MAP_EMPTY,
	CLAIMANT_MAP_IN_USE
} ClaimantMapState;

static ClaimantMapState claimant_map = CLAIMANT_MAP_UNKNOWN;
static Oid	claimant_map_relid = InvalidOid;
static bool claimant_callback_registered = false;

static void
claimant_map_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == claimant_map_relid)
		claimant_map = CLAIMANT_MAP_UNKNOWN;
}

static void
claimant_map_load(Relation roles)
{
	Snapshot	snapshot = RegisterSnapshot(GetLatestSnapshot());
	TableScanDesc scan = table_beginscan(roles, snapshot, 0, NULL);
	TupleTableSlot *slot = table_slot_create(roles, NULL);

	if (!claimant_callback_registered)
	{
		CacheRegisterRelcacheCallback(claimant_map_invalidate, (Datum) 0);
		claimant_callback_registered = true;
	}
	claimant_map_relid = RelationGetRelid(roles);
	claimant_map = table_scan_getnextslot(scan, ForwardScanDirection, slot) ?
		CLAIMANT_MAP_IN_USE : CLAIMANT_MAP_EMPTY;
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
}

/*
 * May the current user claim for consumer, or look at its records
 * (dedup_seen)?  When dedup_consumer_roles maps the consumer to roles, only
 * members of one of them may (superusers are members of every role); an
 * unmapped consumer is open to every holder of EXECUTE unless
 * dedup.require_consumer_roles is on.  A row whose role has been dropped
 * maps nothing: the role is unmapped with it (pg_dump leaves such rows out,
 * since a bare OID restored elsewhere would name another role).  function
 * names the caller for the error.
 */
void
dedup_check_claimant(text *consumer, const char *function)
{
	const DedupRelations *rels;
	Relation	roles;
	Relation	index;
	IndexScanDesc scan;
	ScanKeyData key;
	TupleTableSlot *slot;
	bool		mapped = false;
	bool		allowed = false;
	Oid			user = GetUserId();

	if (!dedup_require_consumer_roles && claimant_map == CLAIMANT_MAP_EMPTY)
		return;
	roles = dedup_table_open(DEDUP_CONSUMER_ROLES, AccessShareLock, false, &rels);
	if (roles == NULL)
		return;					/* version 1.0 of the SQL objects */
	if (claimant_map == CLAIMANT_MAP_UNKNOWN)
		claimant_map_load(roles);
	if (!dedup_require_consumer_roles && claimant_map == CLAIMANT_MAP_EMPTY)
	{
		table_close(roles, AccessShareLock);
		return;
	}

	index = index_open(rels->consumer_roles_key, AccessShareLock);
	dedup_scan_key(&key, index, 1, BTEqualStrategyNumber,
				   PointerGetDatum(consumer));
	slot = table_slot_create(roles, NULL);
	scan = dedup_index_beginscan(roles, index, GetActiveSnapshot(), 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (!allowed && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		claimant = slot_getattr(slot, 2, &isnull);

		if (isnull || !SearchSysCacheExists1(AUTHOID, claimant))
			continue;
		mapped = true;
		allowed = has_privs_of_role(user, DatumGetObjectId(claimant));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(roles, AccessShareLock);

	if (allowed || (!mapped && (!dedup_require_consumer_roles || superuser())))
		return;

	/* the same words whether or not the consumer is mapped: no probing */
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("role \"%s\" may not use %s for consumer \"%s\"",
					GetUserNameFromId(user, false), function,
					text_to_cstring(consumer)),
			 errdetail("Only roles mapped to the consumer in dedup_consumer_roles may; a consumer without a mapping is open to every role while dedup.require_consumer_roles is off."),
			 errhint("A superuser can map the consumer to a role with dedup_allow_claimant().")));
}

/*
 * dedup_consumer_roles_changed(): trigger of dedup_consumer_roles, for each
 * row changed and for TRUNCATE.  Invalidating the table's relcache entry
 * tells every backend, at commit, to look at the table again before its
 * next claim.
 */
Datum
dedup_consumer_roles_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("function dedup_consumer_roles_changed() was not called by the trigger manager")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}
