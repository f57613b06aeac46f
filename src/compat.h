/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  What differs between the PostgreSQL versions dedup builds on (15 to
 *	  18), in one place: each difference behind one name that the rest of
 *	  the code uses on every version.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_COMPAT_H
#define DEDUP_COMPAT_H

#include "utils/wait_event.h"

/* an index scan without instrumentation or ordering (18 added the former) */
#if PG_VERSION_NUM >= 180000
#define dedup_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), 0)
#else
#define dedup_index_beginscan(heap, index, snapshot, nkeys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), 0)
#endif

/*
 * The wait event of a wait of the background workers: on 17 and later one
 * with a name of its own in pg_stat_activity (registered once per process,
 * *event caches it); before, every extension wait is "Extension".
 */
static inline uint32
dedup_wait_event(const char *name, uint32 *event)
{
#if PG_VERSION_NUM >= 170000
	if (*event == 0)
		*event = WaitEventExtensionNew(name);
	return *event;
#else
	return PG_WAIT_EXTENSION;
#endif
}

#endif							/* DEDUP_COMPAT_H */
