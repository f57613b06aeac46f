/*-------------------------------------------------------------------------
 *
 * sweeper_state.h
 *	  What the sweeper knows about each database, in shared memory
 *	  (sweeper_state.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_SWEEPER_STATE_H
#define DEDUP_SWEEPER_STATE_H

#include "datatype/timestamp.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

/*
 * sweeper_state.c: what the sweeper knows about each database, in shared
 * memory, under its own LWLock (tranche "dedup_sweeper_state").
 *
 * The launcher owns the schedule (next_sweep, failures, state) and marks a
 * sweep running; the per-database sweeper records its progress and outcome.
 * All fields are protected by DedupShared->lock.
 */
typedef enum DedupDatabaseState
{
	DEDUP_DB_UNKNOWN,			/* not probed yet: sweep it to find out */
	DEDUP_DB_ACTIVE				/* dedup is installed: swept on schedule */
} DedupDatabaseState;

typedef enum DedupSweepOutcome
{
	DEDUP_SWEEP_NONE,			/* never swept */
	DEDUP_SWEEP_RUNNING,		/* started, no outcome yet */
	DEDUP_SWEEP_FAILED,			/* error, or the sweeper died */
	DEDUP_SWEEP_DONE,			/* every expired row deleted */
	DEDUP_SWEEP_PARTIAL,		/* stopped early: time limit, DDL, a locked row */
	DEDUP_SWEEP_BLOCKED,		/* another session holds a lock it needs */
	DEDUP_SWEEP_NO_EXTENSION	/* dedup is not installed there */
} DedupSweepOutcome;

#define DEDUP_ERROR_LEN 256

typedef struct DedupDatabaseSlot
{
	Oid			dboid;			/* InvalidOid: free slot */
	DedupDatabaseState state;
	TimestampTz next_sweep;
	bool		woken;			/* dedup_sweeper_wake() since the sweep began */
	int			failures;		/* consecutive failed sweeps (back-off) */
	bool		connected;		/* the sweeper last started has connected */
	pid_t		sweeper_pid;	/* sweeping now, or 0 */
	DedupSweepOutcome last_outcome;
	TimestampTz last_start;
	TimestampTz last_end;
	int			blocked_sweeps; /* consecutive sweeps ended 'blocked' */
	int64		last_rows;
	int64		total_rows;
	TimestampTz last_error_at;
	char		last_error[DEDUP_ERROR_LEN];
} DedupDatabaseSlot;

typedef struct DedupSharedState
{
	LWLock	   *lock;
	pid_t		launcher_pid;	/* 0 when no launcher runs */
	Latch	   *launcher_latch;
	Oid			woken_untracked;	/* dedup_sweeper_wake() found no free slot */
	int			nslots;
	DedupDatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
} DedupSharedState;

extern DedupSharedState *DedupShared;
extern void dedup_sweeper_shmem_request(void);
extern void dedup_sweeper_shmem_startup(void);
extern DedupDatabaseSlot *dedup_database_slot(Oid dboid, bool create);
extern void dedup_wake_launcher(void);
extern bool dedup_log_blocked(int blocked);

#endif							/* DEDUP_SWEEPER_STATE_H */
