/*-------------------------------------------------------------------------
 *
 * sweeper_state.h
 *	  What the sweeper knows about each database, in shared memory
 *	  (sweeper_state.c): the events the launcher and the per-database
 *	  sweeper report to it, and what they ask of it.  Its memory and its
 *	  lock are its own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_SWEEPER_STATE_H
#define DEDUP_SWEEPER_STATE_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/* how a database's last sweep went, as the dedup_sweeper view shows it */
typedef enum DedupSweepOutcome
{
	DEDUP_SWEEP_NONE,			/* never swept */
	DEDUP_SWEEP_RUNNING,		/* started, no outcome yet */
	DEDUP_SWEEP_VACUUMING,		/* deletes over, vacuuming what they left */
	DEDUP_SWEEP_FAILED,			/* error, or the sweeper died */
	DEDUP_SWEEP_DONE,			/* every expired row deleted */
	DEDUP_SWEEP_PARTIAL,		/* stopped early: time limit, DDL, a locked
								 * row */
	DEDUP_SWEEP_BLOCKED,		/* another session holds a lock it needs */
	DEDUP_SWEEP_NO_EXTENSION	/* dedup is not installed there */
} DedupSweepOutcome;

/* the launcher: which databases it tracks, and their schedule */
extern void dedup_launcher_attach(void);
extern void dedup_untrack_unlisted(List *listed);
extern Oid	dedup_take_woken_untracked(void);
extern bool dedup_track_database(Oid dboid, bool take_slot);
extern bool dedup_sweep_due(Oid dboid);
extern TimestampTz dedup_next_sweep_due(void);
extern void dedup_reschedule_sweeps(void);

/* the launcher: one sweep, from launch to the next one's schedule */
extern void dedup_sweep_launching(Oid dboid, TimestampTz launched);
extern void dedup_sweep_not_launched(Oid dboid, TimestampTz launched);
extern bool dedup_sweeper_connected(Oid dboid);
extern bool dedup_sweep_stopped_connecting(Oid dboid, const char *why,
										   int *blocked_sweeps);
extern bool dedup_sweep_schedule_next(Oid dboid, TimestampTz launched,
									  bool stopped_connecting);

/* the sweeper of one database */
extern bool dedup_sweeper_attach(Oid dboid, TimestampTz start);
extern void dedup_sweeper_progress(uint64 rows);
extern void dedup_sweeper_vacuuming(void);
extern void dedup_sweeper_vacuum_cut(Oid relid, int64 vacuums);
extern bool dedup_sweeper_vacuum_left(Oid relid, int64 vacuums);
extern bool dedup_sweeper_take_prepared_wake(void);
extern void dedup_sweeper_prepared_found(bool marked, int nprepared,
										 TimestampTz oldest);
extern bool dedup_sweeper_log_blocked(int *blocked_sweeps);
extern void dedup_sweeper_finish(DedupSweepOutcome outcome,
								 const char *error);
extern void dedup_sweeper_error(const char *error);
extern bool dedup_sweeper_invalid_windows(uint32 windows);

#endif							/* DEDUP_SWEEPER_STATE_H */
