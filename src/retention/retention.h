/*-------------------------------------------------------------------------
 *
 * retention.h
 *	  Retention: the rule and the consumer walk (rule.c), and the sweep of
 *	  expired processed_messages rows (sweep.c), which the sweeper, the
 *	  storage figures and the colocated sweep build on.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_RETENTION_H
#define DEDUP_RETENTION_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "tables/relations.h"

/* one consumer with expired rows, and how far its sweep has come */
typedef struct DedupSweepTarget
{
	text	   *consumer;
	TimestampTz cutoff;			/* rows older than this are expired */
	TimestampTz resume;			/* rows older than this are done with */
} DedupSweepTarget;

/*
 * A consumer with rows in processed_messages or a window of its own in
 * dedup_retention, and what the retention rule makes of it: the walk the
 * sweep and the storage figures (storage.c) share.
 */
typedef struct DedupConsumer
{
	text	   *name;
	bool		has_rows;		/* it has rows in processed_messages */
	TimestampTz oldest;			/* if has_rows: its oldest claim */
	TimestampTz latest;			/* if has_rows: its latest claim */
	Interval   *window;			/* its window; NULL: kept forever */
	bool		window_valid;	/* NULL, or dedup_retention_is_valid() */
	bool		expires;		/* rows older than cutoff are expired */
	TimestampTz cutoff;
} DedupConsumer;

/* the consumer walk and the rule (rule.c) */
extern List *dedup_consumers(const DedupRelations *rels,
							 const char *only_consumer, bool with_windows);

extern bool dedup_consumer_cutoff(const DedupRelations *rels, text *consumer,
								  TimestampTz latest, TimestampTz *cutoff);

/* the sweep (sweep.c) */
extern bool dedup_sweep_lock(Oid messages, bool wait);
extern void dedup_sweep_check_role(const DedupRelations *rels, Oid role);
extern List *dedup_sweep_targets(const DedupRelations *rels,
								 const char *only_consumer, List **invalid);
extern void dedup_warn_invalid_window(const DedupConsumer *consumer);
extern uint64 dedup_sweep_batch(const DedupRelations *rels,
								DedupSweepTarget *target, int batch_size);

#endif							/* DEDUP_RETENTION_H */
