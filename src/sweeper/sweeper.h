/*-------------------------------------------------------------------------
 *
 * sweeper.h
 *	  The retention worker's interface to the module entry (dedup.c):
 *	  registering the launcher and its shared memory.  Within the folder,
 *	  the per-database sweeper, a short-lived background worker that the
 *	  launcher starts (sweeper.c), and who holds a lock a worker waits for,
 *	  which both of them report.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_SWEEPER_H
#define DEDUP_SWEEPER_H

#include "storage/lock.h"

/* for dedup.c: the launcher (launcher.c), the shared state (sweeper_state.c) */
extern void dedup_register_launcher(void);
extern void dedup_sweeper_shmem_request(void);
extern void dedup_sweeper_shmem_startup(void);

extern PGDLLEXPORT void dedup_sweeper_main(Datum main_arg);
extern int	dedup_lock_holder(const LockData *data, const LOCKTAG *tag,
							  LOCKMODE mode, int waiter);

#endif							/* DEDUP_SWEEPER_H */
