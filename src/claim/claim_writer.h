/*-------------------------------------------------------------------------
 *
 * claim_writer.h
 *	  The claim itself, ON CONFLICT DO NOTHING's speculative insertion into
 *	  processed_messages, and ON CONFLICT DO UPDATE's into stream_positions
 *	  (claim_writer.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CLAIM_WRITER_H
#define DEDUP_CLAIM_WRITER_H

#include "access/attnum.h"
#include "executor/tuptable.h"
#include "utils/relcache.h"

/* What a claim of one key found; the order of dedup_claim_status's labels */
typedef enum ClaimOutcome
{
	CLAIM_CLAIMED,				/* recorded now */
	CLAIM_DUPLICATE,			/* recorded before */
	CLAIM_IN_PROGRESS			/* another open transaction is at it */
} ClaimOutcome;

typedef struct ClaimWriter ClaimWriter;

/*
 * ON CONFLICT DO UPDATE's WHERE: whether to replace existing, the locked
 * row with the key of the new one, by the new one; arg is the caller's.
 */
typedef bool (*ClaimUpdateTest) (TupleTableSlot *existing, void *arg);

extern ClaimWriter *dedup_claim_writer_begin(Relation rel, Oid key_index,
											 AttrNumber fingerprint_attnum,
											 bool key_target);
extern ClaimOutcome dedup_claim_writer_insert(ClaimWriter *writer,
											  Datum consumer,
											  Datum message_id,
											  Datum fingerprint,
											  bool has_fingerprint,
											  bool wait);
extern bool dedup_claim_writer_upsert(ClaimWriter *writer,
									  const Datum *values, int nvalues,
									  ClaimUpdateTest test, void *arg);
extern void dedup_claim_writer_end(ClaimWriter *writer);

#endif							/* DEDUP_CLAIM_WRITER_H */
