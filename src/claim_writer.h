/*-------------------------------------------------------------------------
 *
 * claim_writer.h
 *	  The claim itself, ON CONFLICT DO NOTHING's speculative insertion into
 *	  processed_messages (claim_writer.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_CLAIM_WRITER_H
#define DEDUP_CLAIM_WRITER_H

#include "access/attnum.h"
#include "utils/relcache.h"

/* What a claim of one key found; the order of dedup_claim_status's labels */
typedef enum ClaimOutcome
{
	CLAIM_CLAIMED,				/* recorded now */
	CLAIM_DUPLICATE,			/* recorded before */
	CLAIM_IN_PROGRESS			/* another open transaction is at it */
} ClaimOutcome;

typedef struct ClaimWriter ClaimWriter;

extern ClaimWriter *dedup_claim_writer_begin(Relation rel, Oid key_index,
											 AttrNumber fingerprint_attnum);
extern ClaimOutcome dedup_claim_writer_insert(ClaimWriter *writer,
											  Datum consumer,
											  Datum message_id,
											  Datum fingerprint,
											  bool has_fingerprint,
											  bool wait);
extern void dedup_claim_writer_end(ClaimWriter *writer);

#endif							/* DEDUP_CLAIM_WRITER_H */
