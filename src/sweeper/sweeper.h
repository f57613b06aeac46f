/*-------------------------------------------------------------------------
 *
 * sweeper.h
 *	  The per-database sweeper, a short-lived background worker that the
 *	  launcher starts (sweeper.c); and who holds a lock a worker waits for,
 *	  which both of them report.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_SWEEPER_H
#define DEDUP_SWEEPER_H

#include "storage/lock.h"

extern PGDLLEXPORT void dedup_sweeper_main(Datum main_arg);
extern int	dedup_lock_holder(const LockData *data, const LOCKTAG *tag,
							  LOCKMODE mode, int waiter);

#endif							/* DEDUP_SWEEPER_H */
