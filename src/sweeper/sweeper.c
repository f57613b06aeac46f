/*-------------------------------------------------------------------------
 *
 * sweeper.c
 *	  The per-database sweeper: a short-lived background worker, started by
 *	  the launcher, that deletes one database's expired processed_messages
 *	  rows and exits.
 *
 * It stays out of the way: every batch (at most dedup.sweep_batch_size
 * rows) is its own transaction, so no lock, snapshot or xmin is held
 * between batches; it never waits for a table lock, and hardly for a row
 * lock (it gives up and tries at the next sweep instead, so it cannot
 * deadlock with ALTER EXTENSION or other DDL); between batches it steps
 * aside for DROP DATABASE and ALTER DATABASE, which otherwise fail while a
 * session is connected; while claims run anywhere on the server it yields
 * to them, working only dedup.sweep_busy_share of the time, and when none
 * do it goes at full speed (sweep_pace.c); it pauses at least
 * dedup.sweep_batch_delay between batches, if a DBA wants to leave still
 * more of the machine to claims; and it stops after
 * dedup.sweep_max_duration.  When a sweep has left enough dead rows, the
 * sweeper then vacuums the table itself (and dedup_outbox likewise after
 * the outbox's step: sweep_vacuum.c), rather than
 * leave them for autovacuum's next visit; the launcher cancels that VACUUM
 * for DROP DATABASE and ALTER DATABASE (launcher.c), and a cancelled sweep
 * ends partial, not failed.
 *
 * The launcher sweeps one database after the other: so that none holds up
 * the others, a sweep stops after dedup.sweep_max_duration wherever it is,
 * its VACUUM included.  It checks the time between batches, and a
 * statement timeout at the deadline stops whatever transaction or VACUUM
 * runs past it; a sweep stopped so ends partial.
 *
 * It runs no SQL on processed_messages: rows are found and deleted through
 * the table's index, by OID (sweep.c).  Then it deletes the sent outbox
 * messages past dedup.outbox_retention, in batches (outbox/maintain.c).
 * On a Citus coordinator it then sweeps the colocated records tables with
 * distributed DELETEs through SPI (colocated_sweep.c,
 * sweeper_sweep_colocated), each table as its owner and on its own: one
 * that fails does not stop the others.  Each sweep
 * transaction of processed_messages runs as dedup.sweep_role, or else the
 * owner of the table, in a security-restricted operation (as VACUUM and
 * REFRESH MATERIALIZED VIEW run as the table's owner), and only if that
 * role has the privileges a DELETE of expired rows would need.  The
 * session user stays the bootstrap superuser: pg_stat_activity shows the
 * role in the sweeper's query text.  Each also has a GUC nest level of its
 * own, as VACUUM gives the work it runs as a table's owner: a setting that
 * user code changed, even with set_config(..., false), ends with it.
 *
 * Its settings are the server's (postgresql.conf, ALTER SYSTEM, the command
 * line), never what ALTER DATABASE ... SET or ALTER ROLE ... SET set for
 * its database or the bootstrap superuser: it saves them before connecting,
 * and puts them back after (those come from pg_db_role_setting as it
 * connects); over them, its own (sweeper_settings).  So a database's owner
 * can neither stall nor break its sweeps, nor slow its VACUUM
 * (vacuum_cost_page_*, maintenance_work_mem) to hold up the other
 * databases.
 *
 * Until it has connected, the sweeper may wait for a lock on its database
 * (ALTER DATABASE RENAME in an open transaction) without limit; the
 * launcher watches for that and stops it (launcher.c).  From then on every
 * lock wait is bounded: table locks are only tried, lock_timeout bounds the
 * rest (catalogs, rows), and dedup.sweep_max_duration the whole sweep.
 *
 * A sweeper that finds no dedup also counts its database's prepared
 * transactions: one of them may be a CREATE EXTENSION whose wake-up waits
 * for COMMIT PREPARED (sweeper_state.c).
 *
 * Every line the sweeper logs names its database, in a CONTEXT line as
 * autovacuum's do (the launcher gives it the name); consumers whose
 * retention window is invalid are named in a WARNING once, not at every
 * sweep, until the invalid windows change.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "citus/citus.h"
#include "compat.h"
#include "guc.h"
#include "outbox/outbox.h"
#include "retention/retention.h"
#include "sweeper/sweep_pace.h"
#include "sweeper/sweep_vacuum.h"
#include "sweeper/sweeper.h"
#include "sweeper/sweeper_state.h"
#include "tables/relations.h"

/*
 * The sweeper's own settings, over the server's (and those autovacuum's
 * workers force too): nothing in postgresql.conf either may stall the
 * sweep (a read-only, or serializable deferrable, transaction), make it fail
 * (read-only, timeouts, exit_on_error), redirect it (search_path) or let
 * it damage a table (zero_damaged_pages).
 */
static const struct
{
	const char *name;
	const char *value;
}			sweeper_settings[] =

{
	/* nothing the sweep runs is looked up through a user's search_path */
	{"search_path", "pg_catalog, pg_temp"},
	{"default_transaction_isolation", "read committed"},
	{"default_transaction_read_only", "off"},
	{"default_transaction_deferrable", "off"},
	{"statement_timeout", "0"},
	{"idle_in_transaction_session_timeout", "0"},
	DEDUP_SWEEPER_VERSION_SETTINGS
	{"exit_on_error", "off"},
	{"zero_damaged_pages", "off"},
	/* VACUUM's decision reads the statistics as they are now */
	{"stats_fetch_consistency", "none"},
	/* its statements are planned at every batch: compiling them costs more */
	{"jit", "off"},

	/*
	 * Table locks are only ever tried (sweeper_begin), and claims never lock
	 * the rows a sweep deletes; this bounds the wait for a row that someone
	 * else has locked, say with SELECT ... FOR UPDATE.
	 */
	{"lock_timeout", "100ms"},
};

/*
 * The user ID and security context of the session, restored at the end of
 * each sweep transaction, the name of the role the current one runs as
 * (for pg_stat_activity), and its GUC nest level (0 until it has one).
 */
static Oid	session_userid;
static int	session_sec_context;
static NameData sweep_role_name;
static int	sweep_guc_nestlevel = 0;

/*
 * The settings the server gave this process, saved before it connected:
 * every one that ALTER DATABASE or ALTER ROLE can set.
 */
typedef struct ServerSetting
{
	char	   *name;
	char	   *value;
} ServerSetting;

static ServerSetting *server_settings;
static int	nserver_settings;

/*
 * Before connecting: save the value of every setting that
 * pg_db_role_setting can hold (those a superuser or a role may SET), as the
 * server gave it (postgresql.conf, ALTER SYSTEM, the command line, the
 * defaults).
 */
static void
sweeper_save_server_settings(void)
{
	struct config_generic **vars;
	int			nvars;

	vars = dedup_guc_variables(&nvars);
	server_settings = palloc(nvars * sizeof(ServerSetting));
	nserver_settings = 0;
	for (int i = 0; i < nvars; i++)
	{
		const char *value;

		if (vars[i]->context != PGC_SUSET && vars[i]->context != PGC_USERSET)
			continue;
		value = GetConfigOption(vars[i]->name, false, false);
		if (value == NULL)
			continue;
		server_settings[nserver_settings].name = pstrdup(vars[i]->name);
		server_settings[nserver_settings].value = pstrdup(value);
		nserver_settings++;
	}
}

/*
 * After connecting, outside a transaction: put back the server's value of
 * every setting that came from pg_db_role_setting (ALTER ROLE ALL, ALTER
 * DATABASE, ALTER ROLE, ALTER ROLE IN DATABASE ... SET), then set the
 * sweeper's own.  A name that the server does not know (a placeholder for
 * some library's setting) is left: nothing the sweeper runs reads it.
 *
 * Interrupts are held until every setting is in place: a timeout that the
 * database's settings armed while the connection was made (PostgreSQL 17's
 * transaction_timeout = '1ms', say) must find it off when it is looked at,
 * not end the sweeper at the first log line in between.
 */
static void
sweeper_apply_settings(void)
{
	struct config_generic **vars;
	int			nvars;

	HOLD_INTERRUPTS();
	vars = dedup_guc_variables(&nvars);
	for (int i = 0; i < nvars; i++)
	{
		if (vars[i]->source < PGC_S_GLOBAL ||
			vars[i]->source > PGC_S_DATABASE_USER)
			continue;
		for (int j = 0; j < nserver_settings; j++)
		{
			if (strcmp(server_settings[j].name, vars[i]->name) != 0)
				continue;
			elog(DEBUG1, "dedup sweep: setting \"%s\" of the database or role ignored: the server's \"%s\" applies",
				 server_settings[j].name, server_settings[j].value);
			SetConfigOption(server_settings[j].name, server_settings[j].value,
							PGC_SUSET, PGC_S_OVERRIDE);
			break;
		}
	}

	for (int i = 0; i < lengthof(sweeper_settings); i++)
		SetConfigOption(sweeper_settings[i].name, sweeper_settings[i].value,
						PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * As autovacuum's workers: no commit waits for a standby (a standby that
	 * is gone would stall the sweep, and every database after it); a failover
	 * may only bring back rows that a later sweep deletes again.
	 */
	if (synchronous_commit > SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
		SetConfigOption("synchronous_commit", "local", PGC_SUSET,
						PGC_S_OVERRIDE);
	RESUME_INTERRUPTS();
}

/*
 * Is DROP DATABASE or ALTER DATABASE waiting for this database?  Both take
 * an AccessExclusiveLock on it and then wait a few seconds for the other
 * sessions to leave; a lock that conflicts with it tells us to go.
 */
static bool
sweeper_database_wanted(void)
{
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, MyDatabaseId, 0);
	if (LockAcquire(&tag, AccessShareLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, AccessShareLock, true);
	return false;
}

/*
 * The pid of a session other than waiter that holds a lock on tag
 * conflicting with mode, in data (from GetLockStatusData(): the launcher
 * and the sweeper read the whole lock table, for the log only), or 0: none
 * found, a prepared transaction, or waiter is queued behind another waiter.
 */
int
dedup_lock_holder(const LockData *data, const LOCKTAG *tag, LOCKMODE mode,
				  int waiter)
{
	LOCKMASK	conflicts = GetLockTagsMethodTable(tag)->conflictTab[mode];

	for (int i = 0; i < data->nelements; i++)
	{
		LockInstanceData *instance = &data->locks[i];

		if (instance->pid != waiter &&
			memcmp(&instance->locktag, tag, sizeof(LOCKTAG)) == 0 &&
			(instance->holdMask & conflicts) != 0)
			return instance->pid;
	}
	return 0;
}

/*
 * A lock the sweep needs is held by another session: the sweep ends
 * 'blocked'.  Say so in the log at the first blocked sweep, and then after
 * 10, 100, 1000... consecutive ones.  Not while the database is still being
 * probed (state unknown): the session whose CREATE EXTENSION woke us may
 * still be releasing its locks.  relid is the table found locked (wanted in
 * mode), InvalidOid for the sweep lock.  Returns NULL with *busy set, for
 * sweeper_begin to return.
 */
static const DedupRelations *
sweeper_blocked(Oid relid, LOCKMODE mode, bool *busy)
{
	int			blocked;
	int			holder = 0;
	LOCKTAG		tag;

	*busy = true;
	if (!dedup_sweeper_log_blocked(&blocked))
		return NULL;

	if (OidIsValid(relid))
	{
		SET_LOCKTAG_RELATION(tag, MyDatabaseId, relid);
		holder = dedup_lock_holder(GetLockStatusData(), &tag, mode, MyProcPid);
	}
	ereport(LOG,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 !OidIsValid(relid) ?
			 errmsg("dedup sweep of database \"%s\" is blocked: another session holds the sweep lock",
					get_database_name(MyDatabaseId)) :
			 holder != 0 ?
			 errmsg("dedup sweep of database \"%s\" is blocked: another session holds a lock on table \"%s\" (pid %d)",
					get_database_name(MyDatabaseId), get_rel_name(relid),
					holder) :
			 errmsg("dedup sweep of database \"%s\" is blocked: another session holds a lock on table \"%s\"",
					get_database_name(MyDatabaseId), get_rel_name(relid)),
			 blocked > 1 ? errdetail("%d consecutive sweeps have been blocked.", blocked) : 0));
	return NULL;
}

/* what the sweep does now, in pg_stat_activity, with its role */
static void
sweeper_report(const char *what)
{
	char		activity[NAMEDATALEN + 64];

	snprintf(activity, sizeof(activity), "dedup sweep as role \"%s\": %s",
			 NameStr(sweep_role_name), what);
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * For the rest of the sweep transaction, run as role in a
 * security-restricted operation with a GUC nest level of its own, as VACUUM
 * and REFRESH MATERIALIZED VIEW run as a table's owner: whatever the sweep
 * may reach of user code (say, an index's functions) runs as the role, can
 * neither create temporary objects nor change settings beyond the
 * transaction (sweeper_end).  An abort restores the session's user ID and
 * settings by itself (AbortTransaction).
 */
static void
sweeper_become(Oid role)
{
	SetUserIdAndSecContext(role,
						   session_sec_context | SECURITY_RESTRICTED_OPERATION);
	sweep_guc_nestlevel = NewGUCNestLevel();
	namestrcpy(&sweep_role_name, GetUserNameFromId(role, false));
}

/* The role a sweep of table runs as: dedup.sweep_role, or the table's owner */
static Oid
sweeper_role(Oid table)
{
	if (dedup_sweep_role[0] != '\0')
		return get_role_oid(dedup_sweep_role, false);
	return dedup_table_owner(table);
}

/*
 * Start a sweep transaction: take the table locks and the sweep lock
 * without waiting, in a fixed order, become the sweep role in a
 * security-restricted operation, and check that it may delete expired
 * rows.  Returns the extension's tables, or NULL (with *busy false) when
 * dedup is not installed, or NULL (with *busy true) when a lock is not free
 * now.
 */
static const DedupRelations *
sweeper_begin(LOCKMODE messages_lock, bool *busy)
{
	const DedupRelations *rels;
	Oid			role;

	*busy = false;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	GetUserIdAndSecContext(&session_userid, &session_sec_context);
	pgstat_report_activity(STATE_RUNNING, "dedup sweep: taking locks");
	PushActiveSnapshot(GetTransactionSnapshot());

	rels = dedup_relations(true);
	if (rels == NULL)
		return NULL;
	if (!ConditionalLockRelationOid(rels->messages, messages_lock))
		return sweeper_blocked(rels->messages, messages_lock, busy);
	if (!ConditionalLockRelationOid(rels->retention, AccessShareLock))
		return sweeper_blocked(rels->retention, AccessShareLock, busy);
	if (!dedup_sweep_lock(rels->messages, false))
		return sweeper_blocked(InvalidOid, NoLock, busy);
	/* DROP EXTENSION may have committed before we got the locks */
	rels = dedup_relations(true);
	if (rels == NULL)
		return NULL;

	role = sweeper_role(rels->messages);
	sweeper_become(role);
	sweeper_report("checking privileges");
	dedup_sweep_check_role(rels, GetUserId());
	return rels;
}

/*
 * Commit a sweep transaction, with the settings it began with, as the
 * session's user again.
 */
static void
sweeper_end(void)
{
	if (sweep_guc_nestlevel > 0)
		AtEOXact_GUC(false, sweep_guc_nestlevel);
	sweep_guc_nestlevel = 0;
	SetUserIdAndSecContext(session_userid, session_sec_context);
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Sweep the colocated records table records in a transaction of its own,
 * as its owner (colocated_sweep.c), bounded by the sweep's deadline (the
 * statement timeout dedup_sweeper_main arms); return the rows deleted.
 */
static uint64
sweeper_sweep_colocated_table(Oid records)
{
	const DedupRelations *rels;
	uint64		deleted = 0;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rels = dedup_relations(true);
	if (rels != NULL &&
		SearchSysCacheExists1(RELOID, ObjectIdGetDatum(records)))
	{
		namestrcpy(&sweep_role_name,
				   GetUserNameFromId(dedup_table_owner(records), false));
		sweeper_report("deleting expired colocated claims");
		deleted = dedup_colocated_sweep_table(rels, records);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return deleted;
}

/*
 * On a Citus coordinator, sweep the registered colocated records tables
 * (colocated.c), each in a transaction of its own, as its owner, in a
 * security-restricted operation (colocated_sweep.c): one distributed
 * DELETE per consumer, which Citus runs on every shard over connections it
 * opens to the workers as that role.  Unlike the batches above these
 * deletes cannot be bounded (a distributed table takes no LIMIT): each
 * takes what one consumer has expired, within the sweep's deadline.  A
 * table that fails (refused for its shape, its owner's privileges, a worker
 * down) is logged and its error shown in dedup_sweeper, and the others are
 * swept all the same: the sweep then ends partial.
 */
static DedupSweepOutcome
sweeper_sweep_colocated(TimestampTz deadline)
{
	MemoryContext sweep_context = CurrentMemoryContext;
	const DedupRelations *rels;
	List	   *tables = NIL;
	List	   *names = NIL;
	ListCell   *lc;
	ListCell   *lc2;
	DedupSweepOutcome outcome = DEDUP_SWEEP_DONE;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rels = dedup_relations(true);
	if (rels != NULL && dedup_citus_group() == 0)
	{
		MemoryContext oldcontext = MemoryContextSwitchTo(sweep_context);

		foreach(lc, dedup_colocated_tables(rels))
		{
			Oid			relid = lfirst_oid(lc);
			char	   *relname = get_rel_name(relid);
			char	   *nspname = get_namespace_name(get_rel_namespace(relid));

			/* dropped since the registry was read: its row goes with it */
			if (relname == NULL || nspname == NULL)
				continue;
			tables = lappend_oid(tables, relid);
			names = lappend(names, quote_qualified_identifier(nspname, relname));
		}
		MemoryContextSwitchTo(oldcontext);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();

	forboth(lc, tables, lc2, names)
	{
		volatile uint64 deleted = 0;

		CHECK_FOR_INTERRUPTS();
		if (sweeper_database_wanted())
			return DEDUP_SWEEP_PARTIAL;
		if (deadline != 0 && GetCurrentTimestamp() >= deadline)
			return DEDUP_SWEEP_PARTIAL;

		PG_TRY();
		{
			deleted = sweeper_sweep_colocated_table(lfirst_oid(lc));
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(sweep_context);
			edata = CopyErrorData();

			/*
			 * Out of time, or cancelled for DDL on the database: the sweep
			 * stops (dedup_sweeper_main).  Any other cancel is this table's
			 * failure: Citus raises a worker's with its SQLSTATE, e.g. a
			 * statement_timeout its owner has set for itself there.
			 */
			if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED &&
				((deadline != 0 && GetCurrentTimestamp() >= deadline) ||
				 sweeper_database_wanted()))
				PG_RE_THROW();
			FlushErrorState();
			AbortCurrentTransaction();
			outcome = DEDUP_SWEEP_PARTIAL;
			/* rows locked elsewhere: as for processed_messages, no failure */
			if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			{
				ereport(LOG,
						(errcode(edata->sqlerrcode),
						 errmsg("dedup sweep of colocated records table %s failed: %s",
								(char *) lfirst(lc2), edata->message),
						 errdetail("The other registered tables are swept all the same; this one is tried again at the next sweep.")));
				dedup_sweeper_error(psprintf("colocated records table %s: %s",
											 (char *) lfirst(lc2),
											 edata->message));
			}
			FreeErrorData(edata);
		}
		PG_END_TRY();
		dedup_sweeper_progress(deleted);
	}
	return outcome;
}

/*
 * The consumers whose retention window is invalid, which the sweep leaves
 * alone: logged when they are not those the last sweep of this database
 * logged (their names and windows, hashed), not at every sweep.
 */
static void
sweeper_warn_invalid_windows(List *invalid)
{
	uint32		windows = 0;
	ListCell   *lc;

	foreach(lc, invalid)
	{
		DedupConsumer *consumer = lfirst(lc);

		windows = hash_combine(windows,
							   hash_bytes((unsigned char *) VARDATA_ANY(consumer->name),
										  VARSIZE_ANY_EXHDR(consumer->name)));
		windows = hash_combine(windows,
							   hash_bytes((unsigned char *) consumer->window,
										  sizeof(Interval)));
	}
	if (!dedup_sweeper_invalid_windows(windows))
		return;
	foreach(lc, invalid)
		dedup_warn_invalid_window(lfirst(lc));
}

/*
 * Before a batch: whether the sweep goes on, neither the database wanted
 * by another (sweeper_database_wanted) nor the deadline (0: none) passed
 */
static bool
sweeper_goes_on(TimestampTz deadline)
{
	CHECK_FOR_INTERRUPTS();
	if (sweeper_database_wanted())
		return false;
	return deadline == 0 || GetCurrentTimestamp() < deadline;
}

/*
 * The outbox's step: delete the database's sent messages older than
 * dedup.outbox_retention, one batch per transaction (outbox/maintain.c),
 * until none is left (DEDUP_SWEEP_DONE), or the deadline (0: none) passes
 * or the database is wanted (DEDUP_SWEEP_PARTIAL).  The first batch follows
 * the claims' last one at once (most sweeps find nothing here, and a pause
 * would cost them dedup.sweep_batch_delay); the next ones are paced like
 * the claims' batches.
 */
static DedupSweepOutcome
sweeper_sweep_outbox(TimestampTz deadline, DedupSweepPace *pace)
{
	int64		deleted;
	bool		paced = false;

	if (dedup_outbox_retention_s < 0)
		return DEDUP_SWEEP_DONE;
	do
	{
		if (paced)
			dedup_sweep_pace_batch(pace);
		if (!sweeper_goes_on(deadline))
			return DEDUP_SWEEP_PARTIAL;
		deleted = dedup_outbox_sweep_batch();
		if (paced)
			dedup_sweep_pace_batch_done(pace);
		if (deleted > 0)
			dedup_sweeper_progress((uint64) deleted);
		paced = true;
	} while (deleted == dedup_sweep_batch_size);
	return DEDUP_SWEEP_DONE;
}

/*
 * Sweep this database: all of it, or until deadline (0: none), DDL or a
 * lock stops us.
 */
static DedupSweepOutcome
sweeper_sweep(TimestampTz deadline, DedupSweepPace *pace)
{
	MemoryContext sweep_context = CurrentMemoryContext;
	MemoryContext oldcontext;
	const DedupRelations *rels;
	List	   *targets;
	List	   *invalid = NIL;
	ListCell   *lc;
	bool		busy;

	/* first, in one short transaction: which consumers have expired rows */
	rels = sweeper_begin(AccessShareLock, &busy);
	if (rels == NULL)
	{
		sweeper_end();
		return busy ? DEDUP_SWEEP_BLOCKED : DEDUP_SWEEP_NO_EXTENSION;
	}
	sweeper_report("listing expired claims");
	/* the list must outlive the transaction */
	oldcontext = MemoryContextSwitchTo(sweep_context);
	targets = dedup_sweep_targets(rels, NULL, &invalid);
	MemoryContextSwitchTo(oldcontext);
	sweeper_warn_invalid_windows(invalid);
	sweeper_end();

	/* then the deletes, one batch per transaction */
	foreach(lc, targets)
	{
		DedupSweepTarget *target = lfirst(lc);
		uint64		deleted;

		do
		{
			/* the pause before it, if any, then the batch's clock */
			dedup_sweep_pace_batch(pace);
			if (!sweeper_goes_on(deadline))
				return DEDUP_SWEEP_PARTIAL;

			rels = sweeper_begin(RowExclusiveLock, &busy);
			if (rels == NULL)
			{
				sweeper_end();
				return busy ? DEDUP_SWEEP_BLOCKED : DEDUP_SWEEP_NO_EXTENSION;
			}
			sweeper_report("deleting expired claims");
			deleted = dedup_sweep_batch(rels, target, dedup_sweep_batch_size);
			elog(DEBUG1, "dedup sweep: deleted %llu rows of consumer \"%s\" in transaction %u, up to %s",
				 (unsigned long long) deleted, text_to_cstring(target->consumer),
				 GetTopTransactionIdIfAny(), timestamptz_to_str(target->resume));
			sweeper_end();
			dedup_sweep_pace_batch_done(pace);
			dedup_sweeper_progress(deleted);
		} while (deleted == (uint64) dedup_sweep_batch_size);
	}
	if (sweeper_sweep_outbox(deadline, pace) != DEDUP_SWEEP_DONE)
		return DEDUP_SWEEP_PARTIAL;
	return sweeper_sweep_colocated(deadline);
}

/*
 * The number of prepared transactions in this database, with in *oldest
 * when the oldest was prepared.  Read from pg_prepared_xact(), the function
 * behind the pg_prepared_xacts view, called directly (the sweeper runs no
 * SQL) in a transaction of its own.
 */
static int
sweeper_prepared_xacts(TimestampTz *oldest)
{
	FmgrInfo	flinfo;
	ReturnSetInfo rsinfo;

	LOCAL_FCINFO(fcinfo, 0);
	int			nprepared = 0;

	*oldest = DT_NOEND;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	pgstat_report_activity(STATE_RUNNING,
						   "dedup sweep: listing prepared transactions");

	memset(&rsinfo, 0, sizeof(rsinfo));
	rsinfo.type = T_ReturnSetInfo;
	rsinfo.econtext = CreateStandaloneExprContext();
	rsinfo.allowedModes = SFRM_ValuePerCall;
	rsinfo.returnMode = SFRM_ValuePerCall;
	fmgr_info(F_PG_PREPARED_XACT, &flinfo);
	InitFunctionCallInfoData(*fcinfo, &flinfo, 0, InvalidOid, NULL,
							 (Node *) &rsinfo);
	for (;;)
	{
		Datum		row;
		HeapTupleHeader tuple;
		bool		dbnull;
		bool		atnull;
		Oid			dbid;
		TimestampTz prepared;

		rsinfo.isDone = ExprSingleResult;
		fcinfo->isnull = false;
		row = FunctionCallInvoke(fcinfo);
		if (rsinfo.isDone == ExprEndResult)
			break;
		/* columns: transaction, gid, prepared, ownerid, dbid */
		tuple = DatumGetHeapTupleHeader(row);
		dbid = DatumGetObjectId(GetAttributeByNum(tuple, 5, &dbnull));
		prepared = DatumGetTimestampTz(GetAttributeByNum(tuple, 3, &atnull));
		if (dbnull || dbid != MyDatabaseId)
			continue;
		nprepared++;
		if (!atnull)
			*oldest = Min(*oldest, prepared);
	}
	FreeExprContext(rsinfo.econtext, true);

	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return nprepared;
}

/* The CONTEXT of every line the sweeper logs: its database (arg). */
static void
sweeper_error_context(void *arg)
{
	errcontext("dedup sweep of database \"%s\"", (const char *) arg);
}

/*
 * No dedup here: keep the database's mark of a wake-up in a prepared
 * transaction while one may hold it (sweeper_state.c).
 */
static void
sweeper_check_prepared(void)
{
	bool		marked = dedup_sweeper_take_prepared_wake();
	TimestampTz oldest;
	int			nprepared = sweeper_prepared_xacts(&oldest);

	elog(DEBUG1, "dedup sweep: extension not installed; %d prepared transaction(s) in the database; wake-up marked at PREPARE: %s",
		 nprepared, marked ? "yes" : "no");
	dedup_sweeper_prepared_found(marked, nprepared, oldest);
}

void
dedup_sweeper_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	TimestampTz start;
	TimestampTz deadline = 0;
	MemoryContext sweep_context;
	DedupSweepPace pace;
	ErrorContextCallback errcallback;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/* binary-upgrade mode writes nothing */
	if (IsBinaryUpgrade)
		proc_exit(0);

	sweep_context = AllocSetContextCreate(TopMemoryContext, "dedup sweep",
										  ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(sweep_context);

	/* every line logged from here on names the database */
	errcallback.callback = sweeper_error_context;
	errcallback.arg = pnstrdup(MyBgworkerEntry->bgw_extra, NAMEDATALEN - 1);
	errcallback.previous = error_context_stack;
	error_context_stack = &errcallback;

	sweeper_save_server_settings();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	/* its transaction's commit left TopMemoryContext current (before 18) */
	MemoryContextSwitchTo(sweep_context);

	/* recorded as begun: the launcher no longer watches our lock waits */
	start = GetCurrentTimestamp();
	if (!dedup_sweeper_attach(dboid, start))
		proc_exit(0);
	if (dedup_sweep_max_duration > 0)
		deadline = TimestampTzPlusMilliseconds(start,
											   dedup_sweep_max_duration * 1000L);

	dedup_sweep_pace_start(&pace);
	PG_TRY();
	{
		DedupSweepOutcome outcome;

		sweeper_apply_settings();
		if (deadline != 0)
			enable_timeout_at(STATEMENT_TIMEOUT, deadline);
		outcome = sweeper_sweep(deadline, &pace);

		/*
		 * then VACUUM what it swept, if enough and not in DDL's way, in the
		 * time left
		 */
		if ((outcome == DEDUP_SWEEP_DONE || outcome == DEDUP_SWEEP_PARTIAL) &&
			!sweeper_database_wanted())
			dedup_sweep_vacuum(deadline);
		disable_timeout(STATEMENT_TIMEOUT, false);
		if (outcome == DEDUP_SWEEP_NO_EXTENSION)
			sweeper_check_prepared();

		elog(DEBUG1, "dedup sweep: %lld batches, %lld pauses yielding to claims for %.0f ms in all",
			 (long long) pace.batches, (long long) pace.yields, pace.yielded_ms);
		dedup_sweeper_finish(outcome, NULL);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		disable_timeout(STATEMENT_TIMEOUT, false);
		MemoryContextSwitchTo(sweep_context);
		edata = CopyErrorData();
		if (edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ||
			edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
		{
			/*
			 * rows locked elsewhere, or cancelled (by the launcher, for DROP
			 * DATABASE or ALTER DATABASE while we vacuum; by the time limit;
			 * or by a DBA): not a failure, the next sweep goes on
			 */
			elog(DEBUG1, "dedup sweep: stopped: %s", edata->message);
			FlushErrorState();
			AbortCurrentTransaction();
			if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
				dedup_sweep_vacuum_cut(deadline);
			dedup_sweeper_finish(DEDUP_SWEEP_PARTIAL, NULL);
		}
		else
		{
			/* log the error, keep its message for the dedup_sweeper view */
			EmitErrorReport();
			FlushErrorState();
			AbortCurrentTransaction();
			dedup_sweeper_finish(DEDUP_SWEEP_FAILED, edata->message);
		}
		RESUME_INTERRUPTS();
	}
	PG_END_TRY();

	proc_exit(0);
}
