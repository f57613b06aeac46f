/*-------------------------------------------------------------------------
 *
 * citus.c
 *	  What Citus manages and where this backend runs.
 *
 * dedup reads and writes its tables itself, by OID, in the node it runs
 * on.  On a Citus cluster that is right in one layout only: the tables
 * local on the coordinator, where the claim runs in the transaction that
 * updates the distributed business tables.  Everything else would be
 * silently wrong, so it is refused with an error naming that layout:
 *
 * - one of the extension's tables managed by Citus (a row of
 *   pg_dist_partition: distributed, reference or Citus local table): its
 *   rows live in shards that dedup never reads, and the local table is an
 *   empty shell;
 * - a call on a Citus worker (pg_dist_local_group names a group other than
 *   the coordinator's), directly or pushed down by create_distributed_function:
 *   the worker's copy of the table is one no distributed query reads, so
 *   a message could be claimed once per node.
 *
 * And on a coordinator with workers, every transaction that uses dedup's
 * tables is made to commit with two-phase commit.  Citus commits a write
 * that reached a single worker with a plain COMMIT sent to the worker
 * before the local commit: a crash of the coordinator, or a serialization
 * failure at its commit, in between would keep the business update and
 * lose the claim, and the redelivered message would be applied again.
 * With two-phase commit the worker only prepares before the local commit,
 * and Citus's recovery commits or rolls back the prepared transaction as
 * the coordinator's commit went.  Citus has no setting that asks for it:
 * the flag is set by its Use2PCForCoordinatedTransaction(), found at run
 * time in the already loaded library (it only marks the transaction;
 * workers that were only read are not prepared).  Where the library does
 * not export it, claims on a coordinator with workers are refused rather
 * than committed with one-phase commit.
 *
 * A colocated claim (colocated.c) writes to a distributed table through
 * Citus's planner, to the worker that holds the business row, and only
 * reads the extension's local tables: while it reads them
 * (dedup_citus_reading_only), no two-phase commit is asked for, and the
 * claim commits with the business update in Citus's one-phase commit of
 * that worker.  A local claim in the same transaction still asks for it;
 * so does any write on the coordinator itself (an outbox row, say): Citus
 * commits the worker at its pre-commit, before the coordinator's commit,
 * which can still fail (a serialization failure) and would keep the claim
 * and lose the local write.  That write may come after the claim, so it is
 * looked for at pre-commit (routed_pre_commit): a transaction that wrote
 * colocated records and has a transaction ID on this node is made to commit
 * with two-phase commit.  The callback is registered by the backend at its
 * first routed write, after Citus's (registered when its library is
 * preloaded), and PostgreSQL calls the latest registered first: it runs
 * before Citus's pre-commit, which reads the flag.
 *
 * The refusals and the two-phase commit are the guard of every lookup of
 * the extension's tables (dedup_citus_check, which _PG_init gives
 * relations.c): every entry point and the sweeper pass through it, with the
 * tables found and before their shape is checked.
 *
 * Citus is found through its catalog tables, looked up by name in
 * pg_catalog: dedup builds, and runs, without it.  They are read once per
 * transaction (and again if the extension's tables change).
 *
 * The background workers (the sweeper) are only refused tables managed by
 * Citus; on a worker node they sweep that node's own table, which does no
 * harm.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_namespace.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "citus/citus.h"
#include "compat.h"

/* the coordinator's group in pg_dist_local_group and pg_dist_node */
#define CITUS_COORDINATOR_GROUP 0

/* pg_dist_partition.logicalrelid, pg_dist_local_group.groupid, pg_dist_node.groupid */
#define ANUM_DIST_PARTITION_RELID 1
#define ANUM_LOCAL_GROUP_GROUPID 1
#define ANUM_DIST_NODE_GROUPID 2

typedef void (*Use2PCFunction) (void);

/* the transaction (and table) whose check passed */
static LocalTransactionId checked_lxid = InvalidLocalTransactionId;
static Oid	checked_messages = InvalidOid;

/* whether that check found a coordinator with workers (a foreground backend) */
static bool checked_needs_2pc = false;

/* the transaction already made to commit with two-phase commit */
static LocalTransactionId twopc_lxid = InvalidLocalTransactionId;

/*
 * Set while a colocated claim (colocated.c) only reads the extension's
 * local tables (the claimant mapping, the registry): a read needs no
 * two-phase commit, and the claim's write goes to the worker alone.
 */
static bool reading_only = false;

/* the transaction that wrote colocated records (routed_pre_commit) */
static LocalTransactionId routed_lxid = InvalidLocalTransactionId;
static bool routed_callback_registered = false;

static Use2PCFunction use_2pc = NULL;
static bool use_2pc_looked_up = false;

/* a table of Citus's catalog, in pg_catalog, or InvalidOid */
static Oid
citus_catalog(const char *name)
{
	return get_relname_relid(name, PG_CATALOG_NAMESPACE);
}

/*
 * Is relid in pg_dist_partition (whose OID is dist_partition)?  When it is
 * and method is not NULL, how it is distributed (*method, partmethod: 'h'
 * for hash) and by which column (*column; InvalidAttrNumber for a
 * reference or Citus local table, which have none).  The columns are found
 * by name; the distribution column is kept by Citus as a Var in the text
 * form of PostgreSQL's nodes, which stringToNode() reads.
 */
static bool
citus_manages(Oid dist_partition, Oid relid, char *method, AttrNumber *column)
{
	Oid			index = citus_catalog("pg_dist_partition_logical_relid_index");
	Relation	catalog = table_open(dist_partition, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found;

	ScanKeyInit(&key, ANUM_DIST_PARTITION_RELID, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(catalog, index, OidIsValid(index), NULL, 1, &key);
	tuple = systable_getnext(scan);
	found = HeapTupleIsValid(tuple);
	if (found && method != NULL)
	{
		AttrNumber	method_attnum = get_attnum(dist_partition, "partmethod");
		AttrNumber	key_attnum = get_attnum(dist_partition, "partkey");
		bool		isnull = true;
		Datum		value = (Datum) 0;

		*method = '\0';
		*column = InvalidAttrNumber;
		if (method_attnum != InvalidAttrNumber)
			value = heap_getattr(tuple, method_attnum,
								 RelationGetDescr(catalog), &isnull);
		if (!isnull)
			*method = DatumGetChar(value);
		isnull = true;
		if (key_attnum != InvalidAttrNumber)
			value = heap_getattr(tuple, key_attnum,
								 RelationGetDescr(catalog), &isnull);
		if (!isnull)
		{
			Node	   *partkey = stringToNode(TextDatumGetCString(value));

			if (partkey != NULL && IsA(partkey, Var))
				*column = ((Var *) partkey)->varattno;
		}
	}
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
	return found;
}

/*
 * An int4 column of the catalog table relid: the first value that is not
 * skip (or skip if there is none), or only the first row's value
 * (first_only).
 */
static int32
citus_group(Oid relid, AttrNumber attnum, bool first_only, int32 skip)
{
	Relation	catalog = table_open(relid, AccessShareLock);
	SysScanDesc scan = systable_beginscan(catalog, InvalidOid, false, NULL, 0, NULL);
	HeapTuple	tuple;
	int32		group = skip;

	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		bool		isnull;
		Datum		value = heap_getattr(tuple, attnum,
										 RelationGetDescr(catalog), &isnull);

		if (!isnull && (first_only || DatumGetInt32(value) != skip))
		{
			group = DatumGetInt32(value);
			break;
		}
	}
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
	return group;
}

static void
refuse_managed(Oid relid)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("table \"%s\" of extension \"dedup\" is managed by Citus",
					get_rel_name(relid)),
			 errdetail("It is a distributed, reference or Citus local table (it is in pg_dist_partition): its rows are in shards that dedup, which reads and writes the table itself, never sees."),
			 errhint("Keep the extension's tables local on the coordinator and distribute only the business tables: save the records, then run DROP EXTENSION dedup CASCADE and CREATE EXTENSION dedup on the coordinator (undistribute_table refuses a table of an extension).")));
}

/*
 * Make Citus commit this transaction's writes on workers with two-phase
 * commit, or refuse when the function that asks for it cannot be found.
 */
static void
require_2pc(void)
{
	if (!use_2pc_looked_up)
	{
		use_2pc = (Use2PCFunction)
			load_external_function("$libdir/citus",
								   "Use2PCForCoordinatedTransaction",
								   false, NULL);
		use_2pc_looked_up = true;
	}
	if (use_2pc == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("dedup cannot make this Citus coordinator commit with two-phase commit"),
				 errdetail("The Citus library does not export Use2PCForCoordinatedTransaction: a write to a worker in this transaction would be committed before the claim, and lost claims would let redelivered messages be applied again."),
				 errhint("Use a Citus build that exports it, or keep dedup on a node that is not a Citus coordinator with workers.")));
	use_2pc();
}

/*
 * Pre-commit of a transaction that wrote colocated records: if it also
 * wrote on this node, make Citus commit it with two-phase commit (see the
 * header comment).
 */
static void
routed_pre_commit(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_PRE_COMMIT || routed_lxid != dedup_local_xid())
		return;
	routed_lxid = InvalidLocalTransactionId;
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()) &&
		twopc_lxid != dedup_local_xid())
	{
		require_2pc();
		twopc_lxid = dedup_local_xid();
	}
}

/*
 * This transaction writes colocated records (a routed claim or forget):
 * at its pre-commit, a write on this node makes it commit with two-phase
 * commit.
 */
void
dedup_citus_routed_write(void)
{
	if (!routed_callback_registered)
	{
		RegisterXactCallback(routed_pre_commit, NULL);
		routed_callback_registered = true;
	}
	routed_lxid = dedup_local_xid();
}

/*
 * Refuse what would be silently wrong on a Citus cluster, and make a
 * coordinator with workers commit with two-phase commit (see the header
 * comment).  rels: the extension's tables, found but not yet opened.  The
 * guard of every lookup of them (dedup_relations_guard).
 */
void
dedup_citus_check(const DedupRelations *rels)
{
	Oid			dist_partition;
	Oid			catalog;
	Oid			tables[5];
	int32		group = CITUS_COORDINATOR_GROUP;

	if (dedup_local_xid() != checked_lxid || rels->messages != checked_messages)
	{
		checked_needs_2pc = false;
		dist_partition = citus_catalog("pg_dist_partition");
		if (OidIsValid(dist_partition))
		{
			tables[0] = rels->messages;
			tables[1] = rels->retention;
			tables[2] = rels->consumer_roles;
			tables[3] = rels->positions;
			tables[4] = rels->colocated;
			for (int i = 0; i < lengthof(tables); i++)
				if (OidIsValid(tables[i]) &&
					citus_manages(dist_partition, tables[i], NULL, NULL))
					refuse_managed(tables[i]);

			group = dedup_citus_group();
			if (group != CITUS_COORDINATOR_GROUP && !dedup_is_background_worker())
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("dedup cannot be used on a Citus worker node"),
						 errdetail("This node is in Citus group %d: no distributed query reads its table \"%s\", so a message claimed here could be claimed again on the coordinator or on another node.",
								   group, get_rel_name(rels->messages)),
						 errhint("Claim on the coordinator, in the transaction that updates the distributed tables, and do not distribute dedup's functions with create_distributed_function.")));

			catalog = citus_catalog("pg_dist_node");
			checked_needs_2pc = group == CITUS_COORDINATOR_GROUP &&
				OidIsValid(catalog) && !dedup_is_background_worker() &&
				citus_group(catalog, ANUM_DIST_NODE_GROUPID, false,
							CITUS_COORDINATOR_GROUP) != CITUS_COORDINATOR_GROUP;
		}
		checked_lxid = dedup_local_xid();
		checked_messages = rels->messages;
	}
	if (checked_needs_2pc && !reading_only && twopc_lxid != dedup_local_xid())
	{
		require_2pc();
		twopc_lxid = dedup_local_xid();
	}
}

/*
 * This node's Citus group (0: the coordinator, or a node that is not part
 * of a cluster yet), or -1 when Citus's catalogs are not here.
 */
int32
dedup_citus_group(void)
{
	Oid			catalog;

	if (!OidIsValid(citus_catalog("pg_dist_partition")))
		return -1;
	catalog = citus_catalog("pg_dist_local_group");
	if (!OidIsValid(catalog))
		return CITUS_COORDINATOR_GROUP;
	return citus_group(catalog, ANUM_LOCAL_GROUP_GROUPID, true,
					   CITUS_COORDINATOR_GROUP);
}

/*
 * While on, dedup_citus_check() does not ask for two-phase commit: the
 * caller (a colocated claim) only reads the extension's local tables.
 * Returns the previous setting, to be restored.
 */
bool
dedup_citus_reading_only(bool on)
{
	bool		was = reading_only;

	reading_only = on;
	return was;
}

/* Is relid a table Citus manages (distributed, reference or Citus local)? */
bool
dedup_citus_distributed(Oid relid)
{
	Oid			dist_partition = citus_catalog("pg_dist_partition");

	return OidIsValid(dist_partition) &&
		citus_manages(dist_partition, relid, NULL, NULL);
}

/*
 * The column relid is hash-distributed by, or InvalidAttrNumber when it is
 * not hash-distributed (not a Citus table, a reference or a Citus local
 * table, one distributed by append or range).
 */
AttrNumber
dedup_citus_hash_column(Oid relid)
{
	Oid			dist_partition = citus_catalog("pg_dist_partition");
	char		method;
	AttrNumber	column;

	if (!OidIsValid(dist_partition) ||
		!citus_manages(dist_partition, relid, &method, &column) ||
		method != 'h')
		return InvalidAttrNumber;
	return column;
}
