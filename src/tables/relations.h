/*-------------------------------------------------------------------------
 *
 * relations.h
 *	  The extension's tables and the indexes the claim and the sweep use,
 *	  found through pg_extension and pg_depend, never by a name resolved at
 *	  run time (relations.c), and their rows deleted by TID as DELETE does
 *	  (tid_delete.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_RELATIONS_H
#define DEDUP_RELATIONS_H

#include "access/attnum.h"
#include "access/skey.h"
#include "datatype/timestamp.h"
#include "executor/tuptable.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

typedef struct DedupRelations
{
	Oid			extension;		/* pg_extension row of dedup */
	Oid			schema;			/* where it is installed */
	Oid			messages;		/* processed_messages */
	Oid			messages_key;	/* its (consumer_name, message_id) key */
	Oid			messages_time;	/* its (consumer_name, processed_at) index */
	AttrNumber	fingerprint_attnum; /* its fingerprint column (1.1), or 0 */
	Oid			retention;		/* dedup_retention */
	Oid			retention_key;	/* its (consumer_name) key */
	Oid			consumer_roles; /* dedup_consumer_roles (1.1), or invalid */
	Oid			consumer_roles_key; /* its (consumer_name, claimant) key */
	Oid			positions;		/* stream_positions (1.2), or invalid */
	Oid			positions_key;	/* its (consumer_name, stream, partition) key */
	Oid			colocated;		/* dedup_colocated_tables (1.2), or invalid */
} DedupRelations;

typedef enum DedupTable
{
	DEDUP_MESSAGES,
	DEDUP_RETENTION,
	DEDUP_CONSUMER_ROLES,
	DEDUP_STREAM_POSITIONS
} DedupTable;

/* run at every lookup, with the tables found, before they are checked */
typedef void (*DedupRelationsGuard) (const DedupRelations *rels);

extern const DedupRelations *dedup_relations(bool missing_ok);
extern void dedup_relations_guard(DedupRelationsGuard guard);
extern Relation dedup_table_open(DedupTable table, LOCKMODE lockmode,
								 bool missing_ok, const DedupRelations **rels);
extern Oid	dedup_table_owner(Oid relid);
extern Oid	dedup_member_table(const char *name);
extern void dedup_scan_key(ScanKey key, Relation index, AttrNumber attno,
						   StrategyNumber strategy, Datum value);

/* deleting rows by TID, found through an index, as DELETE does (tid_delete.c) */
extern bool dedup_tid_delete_row(Relation rel, Relation index,
								 const ScanKeyData *keys, int nkeys,
								 ItemPointer tid, TupleTableSlot *slot);
extern uint64 dedup_tid_delete_range(const DedupRelations *rels,
									 text *consumer, TimestampTz from,
									 TimestampTz before, int limit,
									 TimestampTz *last);

#endif							/* DEDUP_RELATIONS_H */
