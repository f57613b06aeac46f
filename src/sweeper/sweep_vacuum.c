/*-------------------------------------------------------------------------
 *
 * sweep_vacuum.c
 *	  The sweeper's VACUUM of processed_messages and dedup_outbox: after a
 *	  sweep, when a table's dead rows exceed dedup.sweep_vacuum_threshold of
 *	  its live ones (plus autovacuum_vacuum_threshold), the sweeper vacuums
 *	  it at once: processed_messages first, then dedup_outbox (1.4), each
 *	  by the same rules, in the time left.
 *
 * Why: autovacuum looks at a table at most once per autovacuum_naptime, and
 * no per-table setting makes it come more often; with a short retention
 * window at full speed, the rows swept between two of its visits are
 * several times the live ones, and the table and its indexes grow to hold
 * them.  The sweeper knows when it has just made dead rows, and so vacuums
 * them while their pages are still in cache.  The outbox is worse: each
 * message leaves dead versions behind (its lease, its sending, its
 * deletion by the retention worker's step, outbox/maintain.c).
 *
 * How: as a utility command runs, ExecVacuum() with a VacuumStmt built
 * here: a plain VACUUM (no FULL, no ANALYZE, no parallel workers, like
 * autovacuum's) of the table by OID, with SKIP_LOCKED.  vacuum() commits
 * the transaction it is given, vacuums the table (and then its TOAST
 * table) in transactions of its own, and starts a new one for its caller to
 * commit; it refuses to run in a transaction block, which a background
 * worker between its own transactions is not in (15 to 18 alike).  Its
 * cross-transaction memory is a child of PortalContext, which a background
 * worker has none of: we provide one for the command, and delete it after.
 *
 * Whose privileges: the sweeper's session user, the bootstrap superuser
 * (BackgroundWorkerInitializeConnectionByOid with no role), which may
 * vacuum every table, as autovacuum's may; vacuum_rel() then runs the work
 * as the table's owner in a security-restricted operation (15 to 18; 17
 * and later also restrict its search_path), as for any VACUUM.
 *
 * Paced like autovacuum: its vacuum_cost_delay and vacuum_cost_limit are
 * autovacuum_vacuum_cost_delay and autovacuum_vacuum_cost_limit when those
 * are set (by default a 2 ms delay, with vacuum_cost_limit), not balanced
 * with autovacuum's workers; every other setting it depends on
 * (vacuum_cost_page_*, maintenance_work_mem...) is the server's, never the
 * database's or a role's (sweeper.c).  What bounds it: it never waits for
 * the table lock (SKIP_LOCKED: if autovacuum or a DBA's VACUUM has it, this
 * sweep does not vacuum); the cost delay leaves the disk to claims; a
 * SIGTERM stops it at the next page, and so does a cancel (SIGINT), which
 * the launcher sends when DROP DATABASE or ALTER DATABASE wants the
 * database (launcher.c); and it gets what is left of the sweep's
 * dedup.sweep_max_duration (the sweep's statement timeout, sweeper.c), so
 * that the one sweeper of the server moves on to the other databases in
 * time: it is not started once that has run out.  A VACUUM stopped there
 * has not failed (the sweep's deletes are committed: the sweep ends
 * partial); it is logged, and the next sweeps leave the table to
 * autovacuum until it has been vacuumed, rather than start again a VACUUM
 * that the limit would stop again (sweeper_state.c).  VACUUM's truncation
 * of empty pages at the end of the table only tries its lock, as
 * autovacuum's does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_node.h"
#include "pgstat.h"
#include "postmaster/autovacuum.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "guc.h"
#include "sweeper/sweep_vacuum.h"
#include "sweeper/sweeper_state.h"
#include "tables/relations.h"

/* The tables the sweeper vacuums, in this order */
typedef enum SweepVacuumTable
{
	SWEEP_VACUUM_MESSAGES,		/* processed_messages */
	SWEEP_VACUUM_OUTBOX			/* dedup_outbox (1.4) */
} SweepVacuumTable;

static const char *const sweep_vacuum_names[] = {
	[SWEEP_VACUUM_MESSAGES] = "processed_messages",
	[SWEEP_VACUUM_OUTBOX] = "dedup_outbox"
};

/*
 * The VACUUM running now, for dedup_sweep_vacuum_cut: the table
 * (InvalidOid while none runs), its name, its VACUUM count before it, and
 * the database's name (read while in a transaction, for the log).
 */
static Oid	vacuum_relid = InvalidOid;
static const char *vacuum_relname;
static int64 vacuum_count_before;
static NameData vacuum_database;

/* autovacuum's pace, for the sweeper's VACUUM (where it has one) */
static void
sweep_vacuum_set_costs(void)
{
	char		value[32];

	if (autovacuum_vac_cost_delay >= 0)
	{
		snprintf(value, sizeof(value), "%g", autovacuum_vac_cost_delay);
		SetConfigOption("vacuum_cost_delay", value, PGC_SUSET, PGC_S_OVERRIDE);
	}
	if (autovacuum_vac_cost_limit > 0)
	{
		snprintf(value, sizeof(value), "%d", autovacuum_vac_cost_limit);
		SetConfigOption("vacuum_cost_limit", value, PGC_SUSET, PGC_S_OVERRIDE);
	}
}

/*
 * Does table need a VACUUM now, and may we have it?  Returns its OID, with
 * its VACUUM count so far in *vacuums, or InvalidOid.  In a transaction.
 */
static Oid
sweep_vacuum_target(SweepVacuumTable table, int64 *vacuums)
{
	const DedupRelations *rels = dedup_relations(true);
	const char *name = sweep_vacuum_names[table];
	PgStat_StatTabEntry *entry;
	Oid			relid;
	double		dead;
	double		live;

	if (rels == NULL)
		return InvalidOid;
	relid = table == SWEEP_VACUUM_MESSAGES ? rels->messages :
		dedup_member_table("dedup_outbox");
	if (!OidIsValid(relid))
		return InvalidOid;
	entry = pgstat_fetch_stat_tabentry(relid);
	if (entry == NULL)
		return InvalidOid;
	dead = dedup_tabentry_dead_tuples(entry);
	live = dedup_tabentry_live_tuples(entry);
	if (dead <= autovacuum_vac_thresh + dedup_sweep_vacuum_threshold * live)
		return InvalidOid;

	*vacuums = dedup_tabentry_vacuums(entry);
	if (dedup_sweeper_vacuum_left(relid, *vacuums))
	{
		elog(DEBUG1, "dedup sweep: not vacuuming %s (%.0f dead rows, %.0f live): left to autovacuum since the time limit stopped this sweeper's last VACUUM of it",
			 name, dead, live);
		return InvalidOid;
	}

	/*
	 * Autovacuum, or a DBA's VACUUM, may be at it already: then leave it
	 * (SKIP_LOCKED would skip it too, but silently).
	 */
	if (!ConditionalLockRelationOid(relid, ShareUpdateExclusiveLock))
	{
		elog(DEBUG1, "dedup sweep: not vacuuming %s (%.0f dead rows, %.0f live): another session holds its lock",
			 name, dead, live);
		return InvalidOid;
	}
	UnlockRelationOid(relid, ShareUpdateExclusiveLock);
	elog(DEBUG1, "dedup sweep: vacuuming %s: %.0f dead rows, %.0f live",
		 name, dead, live);
	return relid;
}

/*
 * Outside any transaction: VACUUM table if enough of it is dead, unless
 * deadline (0: none) has passed, where the sweeper's statement timeout
 * would stop it at once.  Returns whether it did.
 */
static bool
sweep_vacuum_table(SweepVacuumTable table, TimestampTz deadline)
{
	MemoryContext caller_context = CurrentMemoryContext;
	MemoryContext vacuum_context;
	VacuumStmt *stmt;
	ParseState *pstate;
	Oid			relid;
	int64		vacuums = 0;

	if (deadline != 0 && GetCurrentTimestamp() >= deadline)
	{
		elog(DEBUG1, "dedup sweep: not vacuuming %s: the sweep has reached dedup.sweep_max_duration",
			 sweep_vacuum_names[table]);
		return false;
	}

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING, "dedup sweep: counting dead rows");
	PushActiveSnapshot(GetTransactionSnapshot());
	relid = sweep_vacuum_target(table, &vacuums);
	PopActiveSnapshot();
	if (!OidIsValid(relid))
	{
		CommitTransactionCommand();
		pgstat_report_activity(STATE_IDLE, NULL);
		MemoryContextSwitchTo(caller_context);
		return false;
	}

	sweep_vacuum_set_costs();
	dedup_sweeper_vacuuming();
	pgstat_report_activity(STATE_RUNNING,
						   table == SWEEP_VACUUM_MESSAGES ?
						   "dedup sweep: vacuuming processed_messages" :
						   "dedup sweep: vacuuming dedup_outbox");

	/* what must outlive vacuum()'s commits */
	vacuum_context = AllocSetContextCreate(caller_context, "dedup sweep vacuum",
										   ALLOCSET_DEFAULT_SIZES);
	PortalContext = vacuum_context;
	MemoryContextSwitchTo(vacuum_context);
	stmt = makeNode(VacuumStmt);
	stmt->options = list_make2(makeDefElem("skip_locked", NULL, -1),
							   makeDefElem("parallel",
										   (Node *) makeInteger(0), -1));
	stmt->rels = list_make1(makeVacuumRelation(NULL, relid, NIL));
	stmt->is_vacuumcmd = true;
	pstate = make_parsestate(NULL);

	vacuum_relid = relid;
	vacuum_relname = sweep_vacuum_names[table];
	vacuum_count_before = vacuums;
	namestrcpy(&vacuum_database, get_database_name(MyDatabaseId));
	ExecVacuum(pstate, stmt, true);
	vacuum_relid = InvalidOid;
	CommitTransactionCommand();

	PortalContext = NULL;
	MemoryContextSwitchTo(caller_context);
	MemoryContextDelete(vacuum_context);
	pgstat_report_activity(STATE_IDLE, NULL);
	return true;
}

/*
 * After a sweep, outside any transaction: VACUUM processed_messages, then
 * dedup_outbox, each if enough of it is dead, in the time left before
 * deadline (0: none).  Returns whether it vacuumed either.
 */
bool
dedup_sweep_vacuum(TimestampTz deadline)
{
	bool		vacuumed;

	if (dedup_sweep_vacuum_threshold <= 0)
		return false;

	/* the counts we read include our own deletes */
	pgstat_report_stat(true);

	vacuumed = sweep_vacuum_table(SWEEP_VACUUM_MESSAGES, deadline);
	vacuumed |= sweep_vacuum_table(SWEEP_VACUUM_OUTBOX, deadline);
	return vacuumed;
}

/*
 * The sweep was cancelled (its transaction aborted already): if it was
 * in its VACUUM, and deadline (0: none) has passed, the time limit stopped
 * the VACUUM.  Then say so, and leave the table to autovacuum until it has
 * been vacuumed.  Returns whether it was so.
 */
bool
dedup_sweep_vacuum_cut(TimestampTz deadline)
{
	Oid			relid = vacuum_relid;

	vacuum_relid = InvalidOid;
	if (!OidIsValid(relid) || deadline == 0 ||
		GetCurrentTimestamp() < deadline)
		return false;
	dedup_sweeper_vacuum_cut(relid, vacuum_count_before);
	ereport(LOG,
			(errmsg("dedup sweep of database \"%s\" stopped its VACUUM of %s at dedup.sweep_max_duration (%d s)",
					NameStr(vacuum_database), vacuum_relname,
					dedup_sweep_max_duration),
			 errdetail("The sweep's expired rows are deleted.  The sweeper leaves the rest of the VACUUM to autovacuum, or any VACUUM of the table, before it vacuums the table again."),
			 errhint("Raise dedup.sweep_max_duration to let the sweeper vacuum after large sweeps.")));
	return true;
}
